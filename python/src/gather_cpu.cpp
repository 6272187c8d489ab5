// The CPU target: std::thread lanes run the gather bodies of gather.cuh
// against the real controllers (warp size 1: every lane leads its own group).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "gather.cuh"
#include "gather.h"

namespace warpstore::python {

bool target_available() { return true; }

call_slot make_call_slot() {
  call_slot s;
  s.device = new call_record{};
  s.host = s.device;
  return s;
}

void destroy_call_slot(call_slot& s) noexcept {
  delete s.device;
  s = call_slot{};
}

namespace {

// How often the waiting thread asks whether to cancel.
constexpr auto poll_period = std::chrono::milliseconds(20);

// Enough lanes to keep the controller's queues busy, no more than the batch.
unsigned lane_count(std::uint64_t n) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::clamp<std::uint64_t>(n / 16, 1, std::min(64u, 8 * hw)));
}

// Runs body(k) for k in [0, n) on lanes; the calling thread waits, polling,
// and on a cancel sets `cancel` (the lanes' bodies skip what they have not
// started).
template <class Body>
void run_lanes(std::uint64_t n, Body body, std::uint32_t& cancel, const interrupt_poll& poll) {
  const unsigned lanes = lane_count(n);
  std::vector<std::thread> threads;
  std::exception_ptr failure;
  std::mutex m;
  std::condition_variable done_cv;
  unsigned done = 0;
  threads.reserve(lanes);
  for (unsigned l = 0; l < lanes; ++l)
    threads.emplace_back([&, l] {
      try {
        for (std::uint64_t k = l; k < n; k += lanes) body(k);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!failure) failure = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(m);
      if (++done == lanes) done_cv.notify_all();
    });
  {
    std::unique_lock<std::mutex> lock(m);
    bool asked = false;
    while (!done_cv.wait_for(lock, poll_period, [&] { return done == lanes; })) {
      if (asked || !poll) continue;
      lock.unlock();
      if (poll()) {
        asked = true;
        detail::device_atomic<std::uint32_t>(cancel).store(1, detail::memory_order_relaxed);
      }
      lock.lock();
    }
  }
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

template <class W, class I>
void gather_typed(const erased_array& ea, const I* idx, std::uint64_t n, W* out, call_record& rec,
                  const interrupt_poll& poll) {
  array_ref<W> a = static_cast<const array<W>&>(ea.base()).ref();
  a.errors = &rec.errors;
  const std::uint64_t row_words = ea.row_bytes() / sizeof(W);
  if (row_words == 1)
    run_lanes(
        n, [&](std::uint64_t k) { gather_element(a, idx, out, k, &rec.first_bad, &rec.cancel); },
        rec.cancel, poll);
  else
    run_lanes(
        n,
        [&](std::uint64_t k) {
          gather_row_lanes(a, detail::warp::active_mask(), true, ea.rows(), row_words, idx, out,
                           k, &rec.first_bad, &rec.cancel, 1, 0);
        },
        rec.cancel, poll);
}

}  // namespace

// The CPU target runs the whole gather at launch: nothing is left to wait for.
void launch_gather(const erased_array& a, const void* idx, std::uint32_t index_bytes,
                   std::uint64_t n, void* out, std::uintptr_t, call_slot& slot,
                   const interrupt_poll& poll, done_hook on_done, bool& queued) {
  call_record& rec = *slot.device;
  rec = fresh_call_record();
  with_word(a.word_bytes(), [&]<class W>() {
    if (index_bytes == 4)
      gather_typed(a, static_cast<const std::int32_t*>(idx), n, static_cast<W*>(out), rec, poll);
    else
      gather_typed(a, static_cast<const std::int64_t*>(idx), n, static_cast<W*>(out), rec, poll);
  });
  queued = true;
  if (on_done.fn != nullptr) on_done.fn(on_done.arg);
}

void wait_gather(const call_slot&, const interrupt_poll&, const late_hook&) {}
bool gather_done(const call_slot&) { return true; }

}  // namespace warpstore::python

namespace warpstore::python {
int current_device() { return -1; }
}  // namespace warpstore::python
