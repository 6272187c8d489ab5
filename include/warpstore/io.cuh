// The device side of a controller: how a warp gets blocks from storage into
// cache lines. Either through NVMe queue pairs served by another agent (the
// host controller), or by executing the command itself against a copy of the
// file in pinned host memory (the memory controller).
#pragma once

#include <cstdint>

#include "warpstore/detail/platform.cuh"
#include "warpstore/nvme.h"
#include "warpstore/queue.cuh"

namespace warpstore {

enum class io_kind : std::uint32_t { queues, memory };

// One READ a lane wants executed: `blocks` logical blocks at `slba` into `dst`.
struct read_request {
  std::uint64_t slba;
  std::uint32_t blocks;
  std::byte* dst;
};

// The memory controller as kernels see it: a namespace in pinned host memory.
struct memory_source_ref {
  const std::byte* data;  // capacity_blocks * block_size bytes, zero-padded
  std::uint64_t capacity_blocks;

  // Executes a READ the way a controller would, with every lane of `mask`
  // copying. Checks the LBA range like any controller.
  WARPSTORE_HD nvme::status execute_read(unsigned mask, const read_request& r) const {
    if (r.blocks == 0 || r.slba >= capacity_blocks || r.blocks > capacity_blocks - r.slba)
      return nvme::status::make(nvme::status_type::generic, nvme::sc::lba_out_of_range);
    detail::cooperative_copy(mask, r.dst, data + (r.slba << nvme::block_shift),
                             r.blocks << nvme::block_shift);
    return nvme::status::ok();
  }
};

struct io_ref {
  io_kind kind;
  queue_set_ref queues;
  memory_source_ref memory;

  // Warp-collective: every lane of `mask` calls; lanes with `active` set
  // have a request in `r`. Returns this lane's status (ok for inactive
  // lanes). When it returns, the bytes of every successful request are in
  // place and ordered before anything the calling lanes do next.
  WARPSTORE_HD nvme::status read(unsigned mask, bool active, const read_request& r) const {
    return kind == io_kind::memory ? read_memory(mask, active, r) : read_queues(mask, active, r);
  }

 private:
  // Broadcasts lane `src`'s request to the warp.
  WARPSTORE_HD static read_request broadcast(unsigned mask, const read_request& r, unsigned src) {
    read_request b;
    b.slba = detail::warp::shfl(mask, r.slba, src);
    b.blocks = detail::warp::shfl(mask, r.blocks, src);
    b.dst = reinterpret_cast<std::byte*>(
        detail::warp::shfl(mask, reinterpret_cast<std::uint64_t>(r.dst), src));
    return b;
  }

  WARPSTORE_HD nvme::status read_memory(unsigned mask, bool active, const read_request& r) const {
    nvme::status mine = nvme::status::ok();
    unsigned todo = detail::warp::ballot(mask, active);
    while (todo) {
      const unsigned src = detail::warp::first_lane(todo);
      todo &= todo - 1;
      const nvme::status st = memory.execute_read(mask, broadcast(mask, r, src));
      if (detail::warp::lane() == src) mine = st;
    }
    detail::warp::sync(mask);
    return mine;
  }

  WARPSTORE_HD nvme::status read_queues(unsigned mask, bool active, const read_request& r) const {
    const queue_pair_ref& qp = queues.pick(detail::locality_id());
    const std::uint64_t ticket = qp.take_tickets(mask, active);
    nvme::status mine = nvme::status::ok();
    if (active) {
      nvme::command cmd = nvme::make_rw(nvme::opcode::read, 0, 0, r.slba, r.blocks, 0);
      mine = qp.submit(ticket, cmd, r.dst);
    }
    // Wait for each lane's command in turn; the whole warp copies staging.
    unsigned todo = detail::warp::ballot(mask, active && mine.success());
    while (todo) {
      const unsigned src = detail::warp::first_lane(todo);
      todo &= todo - 1;
      if (detail::warp::lane() == src) mine = qp.wait(ticket);
      const std::uint16_t raw = detail::warp::shfl(mask, mine.raw, src);
      const std::uint64_t t = detail::warp::shfl(mask, ticket, src);
      if (nvme::status{raw}.success() && qp.staging != nullptr) {
        const read_request b = broadcast(mask, r, src);
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
