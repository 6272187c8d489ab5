// The per-thread body of `warpstore-bench block`, shared by its GPU kernel
// and by its CPU test (which runs it on std::threads against the CPU target).
#pragma once

#include <cstddef>
#include <cstdint>

#include "support/trace.h"
#include "warpstore/error.h"
#include "warpstore/io.cuh"

namespace warpstore::bench {

// Thread `tid` issues `rounds` reads: read r is request i = (r0 + r) * threads
// + tid of the trace (block tr.index(i), request_bytes long) into slot
// r * threads + tid of dst. All lanes of `mask` call together; lanes with
// tid >= threads take part without a request. A failed read is recorded in
// `errors` with i as the element index.
WARPSTORE_HD inline void block_thread(const io_ref& io, const trace& tr, unsigned mask,
                                      std::uint64_t threads, std::uint64_t tid, std::uint64_t r0,
                                      std::uint32_t rounds, std::uint32_t request_bytes,
                                      std::byte* dst, error_record* errors) {
  const bool live = tid < threads;
  const std::uint32_t blocks = request_bytes >> nvme::block_shift;
  for (std::uint32_t r = 0; r < rounds; ++r) {
    const std::uint64_t i = (r0 + r) * threads + tid;
    io_request req{};
    if (live) {
      req.slba = tr.index(i) * blocks;
      req.blocks = blocks;
      req.dst = dst + (static_cast<std::uint64_t>(r) * threads + tid) * request_bytes;
    }
    const nvme::status st = io.read(mask, live, req);
    if (live && !st.success()) {
      errors->record(st.is_deadline() ? error_kind::deadline : error_kind::io, 0, st, i, req.slba);
    }
  }
}

}  // namespace warpstore::bench
