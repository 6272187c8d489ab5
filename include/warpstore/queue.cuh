// NVMe queue pairs shared by any number of concurrent GPU (or CPU) threads.
//
// Submission: a ticket (atomic add) gives a slot and a turn; the per-slot turn
// counter orders reuse of the slot; the command id is the slot index. A
// thread writes its entry, then sets the slot's mark. Whoever holds the tail
// lock moves the tail past every consecutive marked entry and rings the
// doorbell once for the whole run (coalesced doorbells).
//
// Completion: one waiter at a time holds the CQ lock, retires every new CQE in
// order (phase tag), hands each status to its slot by command id, follows the
// SQ head the controller reports, and rings the CQ head doorbell once. Other
// waiters spin on their slot's word in device memory, not on PCIe.
//
// A slot (and its staging buffer) is reused only after its waiter released
// it, and never more than depth-1 entries are outstanding past the SQ head,
// so the CQ (same depth) cannot overflow.
#pragma once

#include <cstdint>

#include "warpstore/detail/platform.cuh"
#include "warpstore/nvme.h"

namespace warpstore {

// GPU-private protocol state of one queue pair, in device memory.
struct queue_state {
  alignas(64) std::uint64_t ticket;   // next ticket to hand out
  alignas(64) std::uint64_t tail;     // tickets below are visible to the controller
  std::uint32_t tail_lock;
  alignas(64) std::uint64_t cq_head;  // CQ entries retired (sequence)
  std::uint64_t sq_head;              // SQ head reported by the controller (sequence)
  std::uint32_t cq_lock;
  std::uint32_t protocol_errors;      // CQEs naming a slot with no command in flight
};

// Trivially-copyable view of one queue pair. The controller side reads the
// host-visible fields; device code uses all of them.
struct queue_pair_ref {
  // Host-visible (pinned, mapped): what a controller reads and writes.
  nvme::command* sq;
  nvme::completion* cq;
  std::uint32_t* sq_tail_doorbell;
  std::uint32_t* cq_head_doorbell;
  std::byte* staging;  // depth * slot_bytes; nullptr when the controller writes PRP1 directly
  std::uint32_t slot_bytes;
  std::uint32_t depth;  // power of two
  std::uint32_t depth_log2;
  std::uint16_t qid;
  std::uint32_t nsid;
  std::uint64_t timeout_ns;
  // Device-private protocol state.
  queue_state* state;
  std::uint64_t* marks;       // [depth] ticket+1 of the entry written into the slot
  std::uint64_t* turns;       // [depth] how many times the slot was released
  std::uint32_t* completions; // [depth] 0 while in flight, else 0x10000 | status

  WARPSTORE_HD std::uint32_t slot_of(std::uint64_t ticket) const {
    return static_cast<std::uint32_t>(ticket & (depth - 1));
  }
  WARPSTORE_HD std::uint64_t turn_of(std::uint64_t ticket) const { return ticket >> depth_log2; }
  // Where the data of `ticket` lands when the controller delivers into staging.
  WARPSTORE_HD std::byte* staging_of(std::uint64_t ticket) const {
    return staging ? staging + static_cast<std::size_t>(slot_of(ticket)) * slot_bytes : nullptr;
  }

  // Hands out `count` consecutive tickets to the lanes of `mask` that pass
  // `want`; returns this lane's ticket. One atomic per warp keeps a warp's
  // tickets within one window of depth, so no lane waits on a slot its own
  // warp holds.
  WARPSTORE_HD std::uint64_t take_tickets(unsigned mask, bool want) const {
    const unsigned wanting = detail::warp::ballot(mask, want);
    std::uint64_t base = 0;
    const unsigned leader = wanting ? detail::warp::first_lane(wanting) : 0;
    if (want && detail::warp::lane() == leader) {
      base = detail::device_atomic<std::uint64_t>(state->ticket)
                 .fetch_add(detail::warp::popcount(wanting), detail::memory_order_relaxed);
    }
    base = detail::warp::shfl(mask, base, leader);
    return base + detail::warp::rank_in(wanting, detail::warp::lane());
  }

  // Waits until the slot of `ticket` is free, writes `cmd` (its cid and data
  // pointer are filled in here) and marks it. Does not wait for the doorbell:
  // wait() moves the tail if nobody else has. Returns a non-success status
  // only if the slot never came free before the deadline.
  WARPSTORE_HD nvme::status submit(std::uint64_t ticket, nvme::command cmd,
                                   void* destination) const {
    const std::uint32_t slot = slot_of(ticket);
    detail::deadline dl(timeout_ns);
    for (;;) {
      const bool turn_ok = detail::device_atomic<std::uint64_t>(turns[slot]).load(
                               detail::memory_order_acquire) == turn_of(ticket);
      // NVMe keeps at most depth-1 entries between head and tail.
      const bool head_ok = ticket < detail::device_atomic<std::uint64_t>(state->sq_head).load(
                                        detail::memory_order_acquire) +
                                        depth - 1;
      if (turn_ok && head_ok) break;
      if (!head_ok) retire_completions();
      if (dl.expired())
        return nvme::status::make(nvme::status_type::vendor, nvme::sc::deadline_exceeded);
      dl.pause();
    }
    cmd.cid = static_cast<std::uint16_t>(slot);
    cmd.nsid = nsid;
    if (cmd.opc != static_cast<std::uint8_t>(nvme::opcode::flush)) {
      const auto data = reinterpret_cast<std::uint64_t>(staging ? staging_of(ticket) : destination);
      cmd.prp1 = data;
      cmd.prp2 = (data & ~std::uint64_t{4095}) + 4096;
    }
    detail::device_atomic<std::uint32_t>(completions[slot]).store(0, detail::memory_order_relaxed);
    write_entry(sq + slot, cmd);
    // System scope: the controller reads the entry after it sees the doorbell
    // rung by whichever thread moves the tail.
    detail::system_atomic<std::uint64_t>(marks[slot]).store(ticket + 1,
                                                            detail::memory_order_release);
    return nvme::status::ok();
  }

  // Non-blocking: the status if the command of `ticket` has completed.
  WARPSTORE_HD bool poll(std::uint64_t ticket, nvme::status& out) const {
    const std::uint32_t v = detail::device_atomic<std::uint32_t>(completions[slot_of(ticket)])
                                .load(detail::memory_order_acquire);
    if (v == 0) return false;
    out = nvme::status{static_cast<std::uint16_t>(v & 0xFFFFu)};
    return true;
  }

  // Waits (bounded) for the completion of `ticket`, helping move the tail and
  // retire completions meanwhile.
  WARPSTORE_HD nvme::status wait(std::uint64_t ticket) const {
    detail::deadline dl(timeout_ns);
    nvme::status st;
    for (;;) {
      if (poll(ticket, st)) return st;
      if (detail::device_atomic<std::uint64_t>(state->tail).load(detail::memory_order_acquire) <=
          ticket)
        move_tail();
      retire_completions();
      if (poll(ticket, st)) return st;
      if (dl.expired())
        return nvme::status::make(nvme::status_type::vendor, nvme::sc::deadline_exceeded);
      dl.pause();
    }
  }

  // Gives the slot of `ticket` (and its staging buffer) to the next turn.
  // Must be called exactly once per successful submit, after the data was
  // consumed.
  WARPSTORE_HD void release(std::uint64_t ticket) const {
    detail::device_atomic<std::uint64_t>(turns[slot_of(ticket)])
        .store(turn_of(ticket) + 1, detail::memory_order_release);
  }

  // Tail lock holder: advance over every consecutive marked entry, ring once.
  WARPSTORE_HD void move_tail() const {
    detail::device_atomic<std::uint32_t> lock(state->tail_lock);
    if (lock.exchange(1, detail::memory_order_acquire) != 0) return;
    detail::device_atomic<std::uint64_t> tail_ref(state->tail);
    const std::uint64_t start = tail_ref.load(detail::memory_order_relaxed);
    std::uint64_t tail = start;
    while (tail - start < depth &&
           detail::system_atomic<std::uint64_t>(marks[slot_of(tail)]).load(
               detail::memory_order_acquire) == tail + 1)
      ++tail;
    if (tail != start) {
      detail::system_atomic<std::uint32_t>(*sq_tail_doorbell)
          .store(static_cast<std::uint32_t>(tail & (depth - 1)), detail::memory_order_release);
      tail_ref.store(tail, detail::memory_order_release);
    }
    lock.store(0, detail::memory_order_release);
  }

  // CQ lock holder: retire every new completion in order.
  WARPSTORE_HD void retire_completions() const {
    detail::device_atomic<std::uint32_t> lock(state->cq_lock);
    if (lock.load(detail::memory_order_relaxed) != 0 ||
        lock.exchange(1, detail::memory_order_acquire) != 0)
      return;
    detail::device_atomic<std::uint64_t> head_ref(state->cq_head);
    const std::uint64_t start = head_ref.load(detail::memory_order_relaxed);
    std::uint64_t head = start;
    std::uint64_t sq_head = detail::device_atomic<std::uint64_t>(state->sq_head).load(
        detail::memory_order_relaxed);
    for (;;) {
      nvme::completion* e = cq + (head & (depth - 1));
      const bool expected_phase = ((head >> depth_log2) & 1u) == 0;
      const std::uint32_t dw3 =
          detail::system_atomic<std::uint32_t>(*completion_dw3_word(e))
              .load(detail::memory_order_acquire);
      if (nvme::dw3_phase(dw3) != expected_phase) break;
      const std::uint16_t cid = nvme::dw3_cid(dw3);
      const std::uint16_t reported_head =
          detail::system_atomic<std::uint16_t>(e->sq_head).load(detail::memory_order_relaxed);
      if (cid < depth) {
        detail::device_atomic<std::uint32_t>(completions[cid])
            .store(0x10000u | nvme::dw3_status(dw3).raw, detail::memory_order_release);
      } else {
        detail::device_atomic<std::uint32_t>(state->protocol_errors)
            .fetch_add(1, detail::memory_order_relaxed);
      }
      // The reported head is an index; advance our sequence to it.
      sq_head += (reported_head - static_cast<std::uint32_t>(sq_head & (depth - 1))) & (depth - 1);
      ++head;
    }
    if (head != start) {
      head_ref.store(head, detail::memory_order_relaxed);
      detail::device_atomic<std::uint64_t>(state->sq_head).store(sq_head,
                                                                 detail::memory_order_release);
      detail::system_atomic<std::uint32_t>(*cq_head_doorbell)
          .store(static_cast<std::uint32_t>(head & (depth - 1)), detail::memory_order_release);
    }
    lock.store(0, detail::memory_order_release);
  }

 private:
  // Dword 3 (command id, phase, status) as one word: written last, read first.
  WARPSTORE_HD static std::uint32_t* completion_dw3_word(nvme::completion* e) {
    return reinterpret_cast<std::uint32_t*>(reinterpret_cast<std::byte*>(e) + 12);
  }

  WARPSTORE_HD static void write_entry(nvme::command* dst, const nvme::command& c) {
#if WARPSTORE_ON_GPU
    const uint4* s = reinterpret_cast<const uint4*>(&c);
    uint4* d = reinterpret_cast<uint4*>(dst);
#pragma unroll
    for (int i = 0; i < 4; ++i) d[i] = s[i];
#else
    *dst = c;
#endif
  }
};

// All queue pairs of one controller; a caller picks one by locality.
struct queue_set_ref {
  queue_pair_ref* pairs;  // device-visible array
  std::uint32_t count;

  WARPSTORE_HD const queue_pair_ref& pick(unsigned locality) const {
    return pairs[locality % count];
  }
};

}  // namespace warpstore
