// The device side of a controller: how a warp gets blocks from storage into
// cache lines and writes dirty lines back. Either through NVMe queue pairs
// served by another agent (the host controller), or by executing the command
// itself against a copy of the file in pinned host memory (the memory
// controller).
#pragma once

#include <cstdint>

#include "warpstore/detail/platform.cuh"
#include "warpstore/nvme.h"
#include "warpstore/queue.cuh"

namespace warpstore {

enum class io_kind : std::uint32_t { queues, memory };

// One READ or WRITE a lane wants executed: `blocks` logical blocks at `slba`
// into (READ) or from (WRITE) `dst`, a buffer in GPU memory.
struct io_request {
  std::uint64_t slba;
  std::uint32_t blocks;
  std::byte* dst;
};

// The memory controller as kernels see it: a namespace in pinned host memory.
// Writes land in that memory and mark its chunks dirty; the host writes dirty
// chunks back to the file (memory_controller::make_durable).
struct memory_source_ref {
  std::byte* data;  // capacity_blocks * block_size bytes, zero-padded
  std::uint64_t capacity_blocks;
  std::uint32_t* dirty_chunks;  // one flag per 1 << chunk_shift bytes; nullptr: read-only
  std::uint32_t chunk_shift;
  // A warp's READs of lines of at most this many bytes go out together
  // (io_ref::read_memory_together); larger ones in turn, each by the whole
  // warp (options::memory_fill_together; 0: always in turn).
  std::uint32_t together_bytes;

  WARPSTORE_HD static nvme::status check_range(const io_request& r, std::uint64_t capacity) {
    if (r.blocks == 0 || r.slba >= capacity || r.blocks > capacity - r.slba)
      return nvme::status::make(nvme::status_type::generic, nvme::sc::lba_out_of_range);
    return nvme::status::ok();
  }

  // Executes a WRITE: every lane of `mask` copies, one marks the chunks.
  WARPSTORE_HD nvme::status execute_write(unsigned mask, const io_request& r) const {
    if (dirty_chunks == nullptr)
      return nvme::status::make(nvme::status_type::generic, nvme::sc::namespace_write_protected);
    const nvme::status st = check_range(r, capacity_blocks);
    if (!st.success()) return st;
    const std::uint64_t offset = r.slba << nvme::block_shift;
    const std::uint32_t bytes = r.blocks << nvme::block_shift;
    detail::cooperative_copy(mask, data + offset, r.dst, bytes);
    if (detail::warp::lane() == detail::warp::first_lane(mask))
      for (std::uint64_t c = offset >> chunk_shift; c <= (offset + bytes - 1) >> chunk_shift; ++c)
        detail::system_atomic<std::uint32_t>(dirty_chunks[c]).store(1, detail::memory_order_relaxed);
    return nvme::status::ok();
  }

  // Executes a READ the way a controller would, with every lane of `mask`
  // copying. Checks the LBA range like any controller.
  WARPSTORE_HD nvme::status execute_read(unsigned mask, const io_request& r) const {
    const nvme::status st = check_range(r, capacity_blocks);
    if (!st.success()) return st;
    detail::cooperative_copy(mask, r.dst, data + (r.slba << nvme::block_shift),
                             r.blocks << nvme::block_shift);
    return nvme::status::ok();
  }
};

namespace detail {

// How `lanes` lanes of a warp copy k lines (k >= 2) of at most `most`
// bytes each (io_ref::read_memory_together): `share` lanes a line, as many
// lines a round as the lanes allow. A lane copies at most `lane_bytes` of a
// line a round (16 bytes a load, one line's share coalesced), so small lines
// all go at once (512 B lines, 16 a warp: two lanes each) and large ones a
// few at a time, a 64 KiB line with the whole warp, in turn. With every line
// at once, 32 lanes each copying a 64 KiB line of its own read the 1-D miss
// path at 0.66 M lines a second, against 7.2 M with the warp copying each
// line in turn (H200, 2026-12-03, bench/python_pressure.py). The warp takes
// this way only for lines of at most memory_source_ref::together_bytes:
// from 2 KiB a line keeps all 32 lanes busy (four 16-byte loads each) by
// itself, and shares that do not divide the warp leave lanes idle (4 KiB
// lines, nine at once: shares of 12 lanes, two lines a round, 30 rounds of
// four loads a lane against 18 in turn).
struct together {
  static constexpr unsigned none = 32;  // no request for this lane this round
  static constexpr std::uint32_t lane_bytes = 512;
  unsigned share, per_round;
  WARPSTORE_HD together(unsigned lanes, unsigned k, std::uint32_t most) {
    share = lanes / k > 0 ? lanes / k : 1;  // every line in one round where lanes allow
    while (share < lanes && most > std::uint64_t{lane_bytes} * share) share *= 2;
    if (share > lanes) share = lanes;
    per_round = lanes / share;
  }
  // The request (a lane of `left`, the requests not yet copied) that the
  // lane of `rank` among the lanes copies this round, or none.
  WARPSTORE_HD unsigned request_of(unsigned left, unsigned rank) const {
    const unsigned q = rank / share;
    if (q >= per_round) return none;
    for (unsigned j = 0; j < q && left != 0; ++j) left &= left - 1;
    return left != 0 ? warp::first_lane(left) : none;
  }
  // The requests left once this round's are copied.
  WARPSTORE_HD unsigned after_round(unsigned left) const {
    for (unsigned j = 0; j < per_round && left != 0; ++j) left &= left - 1;
    return left;
  }
};

}  // namespace detail

struct io_ref {
  io_kind kind;
  queue_set_ref queues;
  memory_source_ref memory;

  // Warp-collective: every lane of `mask` calls, on this same io_ref (the
  // lanes use their own copy of it: queue pair, staging, host copy); lanes with `active` set
  // have a request in `r`. Returns this lane's status (ok for inactive
  // lanes). When it returns, the bytes of every successful request are in
  // place and ordered before anything the calling lanes do next.
  WARPSTORE_HD nvme::status read(unsigned mask, bool active, const io_request& r) const {
    return kind == io_kind::memory ? execute_memory<false>(mask, active, r)
                                   : read_queues(mask, active, r);
  }

  // Warp-collective like read(): lanes with `active` write `r.blocks` blocks
  // from the GPU buffer `r.dst` to `r.slba`. When it returns, each
  // successful write has completed at the controller (not yet durable:
  // flush() makes it so).
  WARPSTORE_HD nvme::status write(unsigned mask, bool active, const io_request& r) const {
    return kind == io_kind::memory ? execute_memory<true>(mask, active, r)
                                   : write_queues(mask, active, r);
  }

  // Warp-collective: lanes with `w_active` write `w` as write() does, lanes
  // with `r_active` read `rd` as read() does, and the READs are in flight
  // while the WRITEs are. The WRITEs' bytes leave their buffers before any
  // READ is posted, so a READ may land in the very buffer a WRITE came from
  // (a dirty cache line written back and refilled in one trip). Through
  // queues both kinds share one ticket window; where that cannot hold them
  // (depth below two warps) or the controller would read the WRITE's buffer
  // itself (no staging), the WRITEs complete before the READs go out.
  WARPSTORE_HD void write_then_read(unsigned mask, bool w_active, const io_request& w,
                                    nvme::status& w_st, bool r_active, const io_request& rd,
                                    nvme::status& r_st) const {
    if (kind == io_kind::memory) {
      w_st = execute_memory<true>(mask, w_active, w);
      r_st = execute_memory<false>(mask, r_active, rd);
      return;
    }
    const queue_pair_ref& qp = queues.pick(detail::locality_id());
    if (qp.staging == nullptr || qp.depth < 2 * detail::warp::size) {
      w_st = write_queues(mask, w_active, w);
      r_st = read_queues(mask, r_active, rd);
      return;
    }
    std::uint64_t wt = 0, rt = 0;
    qp.take_ticket_pair(mask, w_active, r_active, wt, rt);
    const nvme::status posted = post_writes(qp, mask, w_active, w, wt);
    r_st = collect_reads(qp, mask, r_active, rd, rt, submit_read(qp, r_active, rd, rt));
    w_st = collect_write(qp, w_active, wt, posted);
  }

  // One lane: a FLUSH through the queues, completed only after every write
  // completed before it is durable (host controller: fdatasync). The memory
  // controller makes writes visible in pinned host memory only; the host's
  // make_durable() takes them to the file.
  WARPSTORE_HD nvme::status flush() const {
    if (kind == io_kind::memory) {
      detail::fence_release_system();
      return nvme::status::ok();
    }
    const queue_pair_ref& qp = queues.pick(detail::locality_id());
    const std::uint64_t ticket = qp.take_tickets(1u << detail::warp::lane(), true);
    nvme::status st = qp.submit(ticket, nvme::make_flush(0, 0), nullptr);
    if (!st.success()) return st;
    st = qp.wait(ticket);
    if (!st.is_deadline()) qp.release(ticket);
    return st;
  }

  // The halves of read() and write() through queues, for callers that keep
  // commands in flight across other work (array_ref::prefetch and
  // post_write_back): take a window of tickets on pair `pair`, post into it,
  // and later collect. A warp may hold one window at a time: a window is
  // posted only by lanes that hold no other tickets, and collected before
  // they take more (otherwise two warps can wait on each other's slots).
  WARPSTORE_HD std::uint32_t pair_index() const {
    return queues.index_for(detail::locality_id());
  }
  WARPSTORE_HD const queue_pair_ref& pair(std::uint32_t i) const { return queues.pairs[i]; }
  // One atomic for `n` tickets (same n in every lane of `mask`): the first.
  WARPSTORE_HD static std::uint64_t take_window(const queue_pair_ref& qp, unsigned mask,
                                                std::uint32_t n) {
    const unsigned leader = detail::warp::first_lane(mask);
    std::uint64_t base = 0;
    if (n != 0 && detail::warp::lane() == leader)
      base = detail::device_atomic<std::uint64_t>(qp.state->ticket)
                 .fetch_add(n, detail::memory_order_relaxed);
    return detail::warp::shfl(mask, base, leader);
  }
  WARPSTORE_HD static nvme::status post_read(const queue_pair_ref& qp, bool active,
                                             const io_request& r, std::uint64_t ticket) {
    return submit_read(qp, active, r, ticket);
  }
  // Warp-collective: lanes with `active` and a successful `posted` wait for
  // their READ and have its bytes copied into r.dst.
  WARPSTORE_HD static nvme::status complete_reads(const queue_pair_ref& qp, unsigned mask,
                                                  bool active, const io_request& r,
                                                  std::uint64_t ticket, nvme::status posted) {
    return collect_reads(qp, mask, active, r, ticket, posted);
  }
  // Warp-collective: lanes with `active` post a WRITE of r (its bytes are in
  // staging when this returns, if the pair has staging).
  WARPSTORE_HD static nvme::status post_write(const queue_pair_ref& qp, unsigned mask,
                                              bool active, const io_request& r,
                                              std::uint64_t ticket) {
    return post_writes(qp, mask, active, r, ticket);
  }
  WARPSTORE_HD static nvme::status complete_write(const queue_pair_ref& qp, bool active,
                                                  std::uint64_t ticket, nvme::status posted) {
    return collect_write(qp, active, ticket, posted);
  }

 private:
  // Broadcasts lane `src`'s request to the warp.
  WARPSTORE_HD static io_request broadcast(unsigned mask, const io_request& r, unsigned src) {
    io_request b;
    b.slba = detail::warp::shfl(mask, r.slba, src);
    b.blocks = detail::warp::shfl(mask, r.blocks, src);
    b.dst = reinterpret_cast<std::byte*>(
        detail::warp::shfl(mask, reinterpret_cast<std::uint64_t>(r.dst), src));
    return b;
  }

  // The whole warp executes each active lane's request in turn; READs of
  // several small lines at once, each by its own share of the lanes.
  template <bool Write>
  WARPSTORE_HD nvme::status execute_memory(unsigned mask, bool active, const io_request& r) const {
    nvme::status mine = nvme::status::ok();
    unsigned todo = detail::warp::ballot(mask, active);
    if constexpr (!Write) {
      if (detail::warp::popcount(todo) > 1) {
        const std::uint32_t most = detail::warp::max_of(
            mask, active ? static_cast<std::uint32_t>(r.blocks << nvme::block_shift) : 0u);
        if (most <= memory.together_bytes)
          return read_memory_together(mask, active, r, todo, most);
      }
    }
    while (todo) {
      const unsigned src = detail::warp::first_lane(todo);
      todo &= todo - 1;
      const io_request b = broadcast(mask, r, src);
      const nvme::status st = Write ? memory.execute_write(mask, b) : memory.execute_read(mask, b);
      if (detail::warp::lane() == src) mine = st;
    }
    detail::warp::sync(mask);
    return mine;
  }

  // READs of the lanes of `todo` (two or more) from the memory controller,
  // several at once, each line copied by a share of the lanes of `mask`
  // (the rounds: detail::together), so a warp filling k small lines waits
  // for one trip over PCIe, not k in turn (a gather reading 16 small rows a
  // warp fills up to 16 lines a round), and a large line keeps enough lanes.
  WARPSTORE_HD nvme::status read_memory_together(unsigned mask, bool active, const io_request& r,
                                                 unsigned todo, std::uint32_t most) const {
    const detail::together t(detail::warp::popcount(mask), detail::warp::popcount(todo), most);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    for (unsigned left = todo; left != 0; left = t.after_round(left)) {
      const unsigned mine = t.request_of(left, rank);  // a lane of `todo`, or none
      const bool helps = mine != detail::together::none;
      const io_request b = broadcast(mask, r, helps ? mine : detail::warp::lane());
      if (helps && memory_source_ref::check_range(b, memory.capacity_blocks).success())
        detail::shared_copy(t.share, rank % t.share, b.dst,
                            memory.data + (b.slba << nvme::block_shift),
                            static_cast<std::uint32_t>(b.blocks << nvme::block_shift));
    }
    detail::warp::sync(mask);
    return active ? memory_source_ref::check_range(r, memory.capacity_blocks) : nvme::status::ok();
  }

  // Claim every lane's slot, copy the bytes into staging with the whole
  // warp (GPU pull), then post; each lane waits for its own completion.
  WARPSTORE_HD nvme::status write_queues(unsigned mask, bool active, const io_request& r) const {
    const queue_pair_ref& qp = queues.pick(detail::locality_id());
    const std::uint64_t ticket = qp.take_tickets(mask, active);
    return collect_write(qp, active, ticket, post_writes(qp, mask, active, r, ticket));
  }

  WARPSTORE_HD nvme::status read_queues(unsigned mask, bool active, const io_request& r) const {
    const queue_pair_ref& qp = queues.pick(detail::locality_id());
    const std::uint64_t ticket = qp.take_tickets(mask, active);
    return collect_reads(qp, mask, active, r, ticket, submit_read(qp, active, r, ticket));
  }

  // The halves of a WRITE through the queues. post_writes claims each active
  // lane's slot, copies the bytes into its staging buffer with the whole warp
  // (GPU pull) and posts; once it returns, the source buffers may be reused
  // (with staging). collect_write waits for this lane's completion and gives
  // the slot back.
  WARPSTORE_HD static nvme::status post_writes(const queue_pair_ref& qp, unsigned mask, bool active,
                                               const io_request& r, std::uint64_t ticket) {
    nvme::status mine = nvme::status::ok();
    if (active) mine = qp.claim(ticket);
    if (qp.staging != nullptr) {
      unsigned todo = detail::warp::ballot(mask, active && mine.success());
      while (todo) {
        const unsigned src = detail::warp::first_lane(todo);
        todo &= todo - 1;
        const io_request b = broadcast(mask, r, src);
        const std::uint64_t t = detail::warp::shfl(mask, ticket, src);
        detail::cooperative_copy(mask, qp.staging_of(t), b.dst, b.blocks << nvme::block_shift);
      }
      // Each lane's share of the bytes is visible before any lane's mark.
      detail::fence_release_system();
      detail::warp::sync(mask);
    }
    if (active && mine.success())
      qp.post(ticket, nvme::make_rw(nvme::opcode::write, 0, 0, r.slba, r.blocks, 0), r.dst);
    return mine;
  }
  WARPSTORE_HD static nvme::status collect_write(const queue_pair_ref& qp, bool active,
                                                 std::uint64_t ticket, nvme::status posted) {
    if (!active || !posted.success()) return posted;
    const nvme::status st = qp.wait(ticket);
    if (!st.is_deadline()) qp.release(ticket);
    return st;
  }

  // The halves of a READ through the queues: submit, then wait for each
  // lane's command in turn while the whole warp copies staging.
  WARPSTORE_HD static nvme::status submit_read(const queue_pair_ref& qp, bool active,
                                               const io_request& r, std::uint64_t ticket) {
    if (!active) return nvme::status::ok();
    return qp.submit(ticket, nvme::make_rw(nvme::opcode::read, 0, 0, r.slba, r.blocks, 0), r.dst);
  }
  WARPSTORE_HD static nvme::status collect_reads(const queue_pair_ref& qp, unsigned mask,
                                                 bool active, const io_request& r,
                                                 std::uint64_t ticket, nvme::status mine) {
    unsigned todo = detail::warp::ballot(mask, active && mine.success());
    while (todo) {
      const unsigned src = detail::warp::first_lane(todo);
      todo &= todo - 1;
      if (detail::warp::lane() == src) mine = qp.wait(ticket);
      const std::uint16_t raw = detail::warp::shfl(mask, mine.raw, src);
      const std::uint64_t t = detail::warp::shfl(mask, ticket, src);
      if (nvme::status{raw}.success() && qp.staging != nullptr) {
        const io_request b = broadcast(mask, r, src);
        detail::cooperative_copy(mask, b.dst, qp.staging_of(t), b.blocks << nvme::block_shift);
      }
      detail::warp::sync(mask);
      // A command that timed out keeps its slot: the controller may still
      // write its staging buffer.
      const bool timed_out = nvme::status{raw}.is_deadline();
      if (detail::warp::lane() == src && !timed_out) qp.release(ticket);
    }
    return mine;
  }
};

}  // namespace warpstore
