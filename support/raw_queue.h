// Raw NVMe queue access for tests and the reliability study's hostile inputs:
// the caller is the "GPU" at the level of rings and doorbells, without
// queue_pair_ref, so it can hold completions unretired or submit entries
// queue_pair_ref would never write.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "warpstore/nvme.h"
#include "warpstore/queue.cuh"

namespace warpstore::test {

class raw_queue {
 public:
  explicit raw_queue(const queue_pair_ref& qp) : qp_(qp) {}

  void push(nvme::command c) {
    c.cid = static_cast<std::uint16_t>(sq_tail_);
    qp_.sq[sq_tail_] = c;
    sq_tail_ = (sq_tail_ + 1) % qp_.depth;
  }
  void ring_sq() { ring_sq_value(sq_tail_); }
  // Entries and doorbell values exactly as given (the fuzzer's): an entry
  // written into any slot, cid untouched; any value in either doorbell.
  void write_entry(std::uint32_t slot, const nvme::command& c) { qp_.sq[slot] = c; }
  void ring_sq_value(std::uint32_t v) {
    detail::system_atomic<std::uint32_t>(*qp_.sq_tail_doorbell)
        .store(v, detail::memory_order_release);
  }
  void ring_cq_value(std::uint32_t v) {
    detail::system_atomic<std::uint32_t>(*qp_.cq_head_doorbell)
        .store(v, detail::memory_order_release);
  }
  void retire(std::uint32_t n) {
    cq_head_ = (cq_head_ + n) % qp_.depth;
    detail::system_atomic<std::uint32_t>(*qp_.cq_head_doorbell)
        .store(cq_head_, detail::memory_order_release);
  }
  std::uint32_t dw3(std::uint32_t index) const {
    return detail::system_atomic<std::uint32_t>(
               *reinterpret_cast<std::uint32_t*>(reinterpret_cast<unsigned char*>(qp_.cq + index) +
                                                 offsetof(nvme::completion, cid)))
        .load(detail::memory_order_acquire);
  }
  // Waits (bounded) until CQ entry `index` carries `phase`.
  // Bounded, but generous: under sanitizers on a loaded 2-core CI machine a
  // service thread can be starved for seconds; a lost completion still fails.
  bool wait_phase(std::uint32_t index, bool phase,
                  std::chrono::milliseconds limit = std::chrono::seconds(30)) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (nvme::dw3_phase(dw3(index)) == phase) return true;
      std::this_thread::yield();
    }
    return false;
  }
  const nvme::completion& cqe(std::uint32_t index) const { return qp_.cq[index]; }

 private:
  queue_pair_ref qp_;
  std::uint32_t sq_tail_ = 0;
  std::uint32_t cq_head_ = 0;
};

}  // namespace warpstore::test
