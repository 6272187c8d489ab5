// The CPU target's side of the reliability scenarios: std::thread lanes (a
// "warp" is one thread there) read the indices with operator[], store
// values, and run the read/write soak's writers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/reliability/reliability.h"
#include "bench/reliability/soak_rw.h"

namespace warpstore::reliability {

inline void read_on_threads(const array<std::uint64_t>& a,
                            const std::vector<std::uint64_t>& indices,
                            std::vector<std::uint64_t>& out) {
  const auto ref = a.ref();
  const unsigned lanes = 8;
  std::vector<std::thread> threads;
  for (unsigned l = 0; l < lanes; ++l)
    threads.emplace_back([&, l] {
      for (std::size_t k = l; k < indices.size(); k += lanes) out[k] = ref[indices[k]];
    });
  for (auto& t : threads) t.join();
}

// Stores on 4 threads, or (span) one write_span of every value from
// indices[0] on.
inline void write_on_threads(const array<std::uint64_t>& a,
                             const std::vector<std::uint64_t>& indices,
                             const std::vector<std::uint64_t>& values, bool span) {
  const auto ref = a.ref();
  if (span) {
    std::thread([&] { ref.write_span(indices.at(0), values.size(), values.data()); }).join();
    return;
  }
  const unsigned lanes = 4;
  std::vector<std::thread> threads;
  for (unsigned l = 0; l < lanes; ++l)
    threads.emplace_back([&, l] {
      for (std::size_t k = l; k < indices.size(); k += lanes) ref.store(indices[k], values[k]);
    });
  for (auto& t : threads) t.join();
}

// Runs body(w) for w < n on n threads; a thread still running after
// bound_s is a hang: say so and end the process (it cannot be joined).
template <class Body>
void run_bounded(std::uint64_t n, double bound_s, const char* what, const Body& body) {
  std::mutex m;
  std::condition_variable cv;
  std::uint64_t done = 0;
  std::vector<std::thread> threads;
  for (std::uint64_t w = 0; w < n; ++w)
    threads.emplace_back([&, w] {
      body(w);
      std::lock_guard<std::mutex> lock(m);
      ++done;
      cv.notify_all();
    });
  {
    std::unique_lock<std::mutex> lock(m);
    if (!cv.wait_for(lock, std::chrono::duration<double>(bound_s), [&] { return done == n; })) {
      std::fprintf(stderr, "HANG: %s did not finish within %.0f s; stopping (hangs=1)\n", what,
                   bound_s);
      std::fflush(nullptr);
      std::_Exit(4);
    }
  }
  for (auto& t : threads) t.join();
}

inline rw_launcher cpu_rw_launcher() {
  rw_launcher l;
  l.lanes = 1;
  l.round = [](const rw_round& r, double bound_s) {
    run_bounded(r.writers, bound_s, "read/write soak round",
                [&](std::uint64_t w) { rw_writer(r, w); });
  };
  l.device_flush = [](const array_ref<std::uint64_t>& a, double bound_s) {
    bool ok = false;
    run_bounded(1, bound_s, "device flush", [&](std::uint64_t) { ok = a.flush(); });
    return ok;
  };
  return l;
}

}  // namespace warpstore::reliability
