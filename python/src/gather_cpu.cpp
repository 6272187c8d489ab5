// The CPU target: std::thread lanes run the gather bodies of gather.cuh
// against the real controllers (warp size 1: every lane leads its own group).
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "gather.cuh"
#include "gather.h"

namespace warpstore::python {

bool target_available() { return true; }

namespace {

// Enough lanes to keep the controller's queues busy, no more than the batch.
unsigned lane_count(std::uint64_t n) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::clamp<std::uint64_t>(n / 16, 1, std::min(64u, 8 * hw)));
}

template <class Body>
void run_lanes(std::uint64_t n, Body body) {
  const unsigned lanes = lane_count(n);
  std::vector<std::thread> threads;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  threads.reserve(lanes);
  for (unsigned l = 0; l < lanes; ++l)
    threads.emplace_back([&, l] {
      try {
        for (std::uint64_t k = l; k < n; k += lanes) body(k);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

template <class W, class I>
void gather_typed(const erased_array& ea, const I* idx, std::uint64_t n, W* out,
                  std::uint64_t* first_bad) {
  const array_ref<W> a = static_cast<const array<W>&>(ea.base()).ref();
  const std::uint64_t row_words = ea.row_bytes() / sizeof(W);
  if (row_words == 1)
    run_lanes(n, [&](std::uint64_t k) { gather_element(a, idx, out, k, first_bad); });
  else
    run_lanes(n, [&](std::uint64_t k) {
      gather_row(a, ea.rows(), row_words, idx, out, k, first_bad);
    });
}

}  // namespace

std::uint64_t run_gather(const erased_array& a, const void* idx, std::uint32_t index_bytes,
                         std::uint64_t n, void* out, std::uintptr_t, std::uint64_t* first_bad) {
  *first_bad = no_bad_position;
  with_word(a.word_bytes(), [&]<class W>() {
    if (index_bytes == 4)
      gather_typed(a, static_cast<const std::int32_t*>(idx), n, static_cast<W*>(out), first_bad);
    else
      gather_typed(a, static_cast<const std::int64_t*>(idx), n, static_cast<W*>(out), first_bad);
  });
  return *first_bad;
}

}  // namespace warpstore::python

namespace warpstore::python {
int current_device() { return -1; }
}  // namespace warpstore::python
