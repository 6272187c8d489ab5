// NVMe queue pairs shared by any number of concurrent GPU (or CPU) threads.
//
// Submission: a ticket (atomic add) gives a slot and a turn; the per-slot turn
// counter orders reuse of the slot; the command id is the slot index. A
// thread writes its entry, then sets the slot's mark. Whoever holds the tail
// lock moves the tail past every consecutive marked entry and rings the
// doorbell once for the whole run (coalesced doorbells). Only tickets whose
// slot is theirs help move the tail (see claim()): under 1 M threads that
// keeps about one SQ doorbell per 32 commands.
//
// Completion: one waiter at a time holds the CQ lock, retires every new CQE in
// order (phase tag), hands each status to its slot by command id, follows the
// SQ head the controller reports, and rings the CQ head doorbell once. Other
// waiters spin on their slot's word in device memory, not on PCIe.
//
// A slot (and its staging buffer) is reused only after its waiter released
// it, and never more than depth-1 entries sit between SQ head and tail. Up to
// depth commands may be in flight, one more than a CQ of the same depth holds:
// controllers hold a completion back while the CQ is full (NVMe requires
// that anyway). A warp takes its tickets in one window, so the depth must be
// at least the warp size (checked where queue pairs are made).
//
// A wait that passes its deadline marks the queue pair failed: its slot may
// still be written by the controller, so it is never reused, and every later
// submission on that pair fails at once with "abort requested" instead of
// waiting out another deadline.
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
  std::uint32_t failed;               // set by the first wait that timed out
  // Doorbell writes of this side (SQ tail, CQ head): how well they coalesce.
  std::uint64_t sq_doorbells;
  std::uint64_t cq_doorbells;
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
  // The address the controller is given for `staging` (PRP1 of slot 0): its
  // virtual address, except behind an IOMMU (nvme over VFIO: its IOVA).
  std::uint64_t staging_device;
  std::uint32_t slot_bytes;
  std::uint32_t depth;  // power of two
  std::uint32_t depth_log2;
  std::uint16_t qid;
  std::uint32_t nsid;
  std::uint64_t timeout_ns;
  // Controllers that walk PRPs (nvme): the device address of slot 0's PRP
  // list (the pages of its staging buffer after the first; slot s's list
  // at prp_lists + s * prp_list_stride), used as PRP2 of a transfer over
  // more than two memory pages. 0: the controller takes PRP1 as one
  // contiguous buffer (host).
  std::uint64_t prp_lists;
  std::uint32_t prp_list_stride;
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

  // Hands out consecutive tickets to the lanes of `mask` that pass `want`;
  // returns this lane's ticket. One atomic per warp keeps a warp's tickets
  // within one window, so with depth >= warp size no lane waits on a slot
  // its own warp holds.
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

  // take_tickets for two kinds of command in one window: the lanes of `mask`
  // with `first` get the window's first tickets, then those with `second`.
  // A warp that holds commands of both kinds in flight at once (a WRITE and
  // the READ that follows it) must take them together: a window is claimed,
  // waited for and released before the warp takes another, so no two warps
  // ever wait on each other's slots.
  WARPSTORE_HD void take_ticket_pair(unsigned mask, bool first, bool second, std::uint64_t& t1,
                                     std::uint64_t& t2) const {
    const unsigned m1 = detail::warp::ballot(mask, first);
    const unsigned m2 = detail::warp::ballot(mask, second);
    const unsigned n1 = detail::warp::popcount(m1);
    const unsigned leader = detail::warp::first_lane(mask);
    std::uint64_t base = 0;
    if ((m1 | m2) != 0 && detail::warp::lane() == leader)
      base = detail::device_atomic<std::uint64_t>(state->ticket)
                 .fetch_add(n1 + detail::warp::popcount(m2), detail::memory_order_relaxed);
    base = detail::warp::shfl(mask, base, leader);
    t1 = base + detail::warp::rank_in(m1, detail::warp::lane());
    t2 = base + n1 + detail::warp::rank_in(m2, detail::warp::lane());
  }

  // Waits until the slot of `ticket` is free, writes `cmd` (its cid and data
  // pointer, the staging slot or `destination`, are filled in here) and
  // marks it. Does not wait for the doorbell:
  // wait() moves the tail if nobody else has. Returns a non-success status
  // only if the slot never came free before the deadline, or the pair failed.
  WARPSTORE_HD nvme::status submit(std::uint64_t ticket, nvme::command cmd,
                                   void* destination) const {
    const nvme::status st = claim(ticket);
    if (!st.success()) return st;
    post(ticket, cmd, destination);
    return st;
  }

  // The two halves of submit, for a WRITE whose bytes must be copied into
  // the slot's staging buffer in between: claim() waits (bounded) until the
  // slot of `ticket` is free; post() writes the entry and marks it.
  // The timeout counts from the last time the queue moved (its SQ head, as
  // completions retire), not from the ticket: a long queue ahead of the
  // ticket is slow, not stuck (detail::deadline::expired(progress)).
  WARPSTORE_HD nvme::status claim(std::uint64_t ticket) const {
    const std::uint32_t slot = slot_of(ticket);
    detail::deadline dl(timeout_ns);
    for (;;) {
      if (has_failed()) return aborted();
      const bool turn_ok = detail::device_atomic<std::uint64_t>(turns[slot]).load(
                               detail::memory_order_acquire) == turn_of(ticket);
      // NVMe keeps at most depth-1 entries between head and tail.
      const std::uint64_t head =
          detail::device_atomic<std::uint64_t>(state->sq_head).load(detail::memory_order_acquire);
      const bool head_ok = ticket < head + depth - 1;
      if (turn_ok && head_ok) break;
      if (turn_ok) {
        // The slot is ours but the head has not moved past depth-1 entries
        // before it: it moves only when earlier entries reach the controller
        // and their completions are retired, and their waiters may be parked
        // in this very warp, so help with both. A ticket whose slot is still
        // another's only waits: that owner is in wait(), which does both
        // (tens of thousands of far tickets helping would only fight over
        // the two locks).
        move_tail();
        retire_completions();
      }
      if (dl.expired(head)) return fail();
      dl.pause();
    }
    return nvme::status::ok();
  }

  WARPSTORE_HD void post(std::uint64_t ticket, nvme::command cmd, void* destination) const {
    const std::uint32_t slot = slot_of(ticket);
    cmd.cid = static_cast<std::uint16_t>(slot);
    cmd.nsid = nsid;
    if (cmd.opc != static_cast<std::uint8_t>(nvme::opcode::flush)) {
      const std::uint64_t data =
          staging ? staging_device + std::uint64_t{slot} * slot_bytes
                  : reinterpret_cast<std::uint64_t>(destination);
      nvme::set_data(cmd, data);
      if (prp_lists != 0 &&
          (data & (nvme::memory_page - 1)) + (std::uint64_t{cmd.nlb()} << nvme::block_shift) >
              2 * nvme::memory_page)
        cmd.prp2 = prp_lists + std::uint64_t{slot} * prp_list_stride;
    }
    detail::device_atomic<std::uint32_t>(completions[slot]).store(0, detail::memory_order_relaxed);
    write_entry(sq + slot, cmd);
    // System scope: the entry went to host memory, and the thread that rings
    // the doorbell for it is another one; its own fence does not wait for
    // this thread's writes across PCIe.
    detail::system_atomic<std::uint64_t>(marks[slot]).store(ticket + 1,
                                                            detail::memory_order_release);
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
  // retire completions meanwhile. The deadline counts from the pair's last
  // progress (a command consumed or a completion retired): behind a long
  // queue the wait is slow, not stuck, and a timeout here fails the pair.
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
      if (has_failed()) return aborted();
      if (dl.expired_unless_moving([&] { return progress(); })) return fail();
      dl.pause();
    }
  }

  // Moves whenever the pair moves: commands consumed plus completions retired.
  WARPSTORE_HD std::uint64_t progress() const {
    return detail::device_atomic<std::uint64_t>(state->sq_head).load(detail::memory_order_relaxed) +
           detail::device_atomic<std::uint64_t>(state->cq_head).load(detail::memory_order_relaxed);
  }

  WARPSTORE_HD bool has_failed() const {
    return detail::device_atomic<std::uint32_t>(state->failed).load(detail::memory_order_relaxed) !=
           0;
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
    if (lock.load(detail::memory_order_relaxed) != 0 ||
        lock.exchange(1, detail::memory_order_acquire) != 0)
      return;
    detail::device_atomic<std::uint64_t> tail_ref(state->tail);
    const std::uint64_t start = tail_ref.load(detail::memory_order_relaxed);
    std::uint64_t tail = start;
    while (tail - start < depth &&
           detail::system_atomic<std::uint64_t>(marks[slot_of(tail)]).load(
               detail::memory_order_acquire) == tail + 1)
      ++tail;
    if (tail != start) {
      // The tail is published before the doorbell: a completion that reports
      // an SQ head up to it must find it (see retire_completions).
      tail_ref.store(tail, detail::memory_order_release);
      detail::system_atomic<std::uint32_t>(*sq_tail_doorbell)
          .store(static_cast<std::uint32_t>(tail & (depth - 1)), detail::memory_order_release);
      detail::device_atomic<std::uint64_t>(state->sq_doorbells)
          .fetch_add(1, detail::memory_order_relaxed);
    }
    lock.store(0, detail::memory_order_release);
  }

  // CQ lock holder: retire every new completion in order. Entries are read
  // eight at a time (independent loads over PCIe), with one acquire fence per
  // batch that found any.
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
    constexpr std::uint32_t batch = 8;
    for (;;) {
      const std::uint32_t first = static_cast<std::uint32_t>(head & (depth - 1));
      const std::uint32_t n = depth - first < batch ? depth - first : batch;
      std::uint32_t dw2[batch], dw3[batch];
      WARPSTORE_UNROLL
      for (std::uint32_t j = 0; j < batch; ++j)
        if (j < n) load_completion_words(cq + first + j, dw2[j], dw3[j]);
      const bool expected_phase = ((head >> depth_log2) & 1u) == 0;
      std::uint32_t found = 0;
      while (found < n && nvme::dw3_phase(dw3[found]) == expected_phase) ++found;
      if (found == 0) break;
      detail::fence_acquire_system();  // orders the bytes behind the entries we saw
      // Read after the entries: every head they report is at most this tail.
      const std::uint64_t tail =
          detail::device_atomic<std::uint64_t>(state->tail).load(detail::memory_order_relaxed);
      for (std::uint32_t j = 0; j < found; ++j) {
        const std::uint16_t cid = nvme::dw3_cid(dw3[j]);
        std::uint32_t pending = 0;
        // Only a slot with a command in flight takes a completion; anything
        // else (bad cid, duplicate) is a controller bug, counted, not applied.
        if (cid >= depth ||
            !detail::device_atomic<std::uint32_t>(completions[cid]).compare_exchange_strong(
                pending, 0x10000u | nvme::dw3_status(dw3[j]).raw, detail::memory_order_release,
                detail::memory_order_relaxed))
          detail::device_atomic<std::uint32_t>(state->protocol_errors)
              .fetch_add(1, detail::memory_order_relaxed);
        // The reported head is an index; advance our sequence to it, unless
        // it would pass the tail (a stale or bogus value).
        const std::uint64_t advance =
            ((dw2[j] & 0xFFFFu) - static_cast<std::uint32_t>(sq_head & (depth - 1))) & (depth - 1);
        if (sq_head + advance <= tail) sq_head += advance;
      }
      head += found;
      if (found < n) break;
    }
    if (head != start) {
      head_ref.store(head, detail::memory_order_relaxed);
      detail::device_atomic<std::uint64_t>(state->sq_head).store(sq_head,
                                                                 detail::memory_order_release);
      detail::system_atomic<std::uint32_t>(*cq_head_doorbell)
          .store(static_cast<std::uint32_t>(head & (depth - 1)), detail::memory_order_release);
      detail::device_atomic<std::uint64_t>(state->cq_doorbells)
          .fetch_add(1, detail::memory_order_relaxed);
    }
    lock.store(0, detail::memory_order_release);
  }

 private:
  WARPSTORE_HD static nvme::status aborted() {
    return nvme::status::make(nvme::status_type::generic, nvme::sc::abort_requested);
  }
  WARPSTORE_HD nvme::status fail() const {
    detail::device_atomic<std::uint32_t>(state->failed).store(1, detail::memory_order_relaxed);
    return nvme::status::deadline();
  }

  // Reads dwords 2 and 3 of a CQE, around the GPU caches: the controller
  // rewrites the entry on every pass.
  WARPSTORE_HD static void load_completion_words(nvme::completion* e, std::uint32_t& dw2,
                                                 std::uint32_t& dw3) {
#if WARPSTORE_ON_GPU
    // One 8-byte load over PCIe; one fence per batch follows.
    const std::uint64_t v = detail::system_atomic<std::uint64_t>(
                                *reinterpret_cast<std::uint64_t*>(reinterpret_cast<std::byte*>(e) + 8))
                                .load(detail::memory_order_relaxed);
    dw2 = static_cast<std::uint32_t>(v);
    dw3 = static_cast<std::uint32_t>(v >> 32);
#else
    // Word by word, dword 3 first with acquire, as the controller stores them
    // (free on x86, and a pairing ThreadSanitizer can see).
    dw3 = detail::system_atomic<std::uint32_t>(*completion_dw3_word(e))
              .load(detail::memory_order_acquire);
    dw2 = detail::system_atomic<std::uint32_t>(
              *reinterpret_cast<std::uint32_t*>(reinterpret_cast<std::byte*>(e) + 8))
              .load(detail::memory_order_relaxed);
#endif
  }

  // Dword 3 (command id, phase, status) as one word: written last, read first.
  WARPSTORE_HD static std::uint32_t* completion_dw3_word(nvme::completion* e) {
    return reinterpret_cast<std::uint32_t*>(reinterpret_cast<std::byte*>(e) + 12);
  }

  WARPSTORE_HD static void write_entry(nvme::command* dst, const nvme::command& c) {
#if WARPSTORE_ON_GPU
    const uint4* s = reinterpret_cast<const uint4*>(&c);
    uint4* d = reinterpret_cast<uint4*>(dst);
    WARPSTORE_UNROLL
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
  // options::queue_spread: the warps of one multiprocessor spread over the
  // pairs (so a kernel on a few multiprocessors still reaches every service
  // thread), instead of one pair per multiprocessor.
  bool spread = false;

  WARPSTORE_HD std::uint32_t index_for(unsigned locality) const {
    return (spread ? detail::spread_locality(locality) : locality) % count;
  }
  WARPSTORE_HD const queue_pair_ref& pick(unsigned locality) const {
    return pairs[index_for(locality)];
  }
};

}  // namespace warpstore
