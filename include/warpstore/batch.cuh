// Asynchronous batches from kernels: what a warp keeps between posting a
// batch of line reads (array_ref::prefetch) or write-backs
// (array_ref::post_write_back) and waiting for it (array_ref::wait).
//
//   batch_ticket t = a.prefetch(tile_first, tile_n, true);  // post, don't wait
//   compute(previous tile);                                  // I/O in flight
//   if (!a.wait(t)) ...;                                     // errors: a.check() on the host
//   ... read the tile: every line is in the cache, pinned ...
//   a.release(t);                                            // unpin
//
// The ticket is a small per-lane value (about 20 words: keep it in
// registers or local memory); every lane that posted keeps its own copy and
// passes it back, with the same lanes calling together. Protocol and rules:
// array_ref::prefetch.
#pragma once

#include <cstdint>

#include "warpstore/detail/platform.cuh"

namespace warpstore {

struct batch_ticket {
  // Lines one lane has in flight at most: a warp's batch holds up to
  // 32 * rounds lines in flight (fewer where the queue depth is smaller), a
  // CPU thread's `rounds`. Longer spans complete all but their last part
  // inside the post.
  static constexpr std::uint32_t rounds = 8;
  enum flag : std::uint8_t {
    pin = 1,      // the lines stay pinned after wait, until release
    write = 2,    // a write-back batch
    pending = 4,  // a part is in flight: wait has work to do
    failed = 8,   // some line failed (recorded in the array's error record)
    pinned = 16,  // the batch's lines are pinned by this warp (pin, waited, not failed)
  };

  std::uint64_t first = 0;       // first element index asked for
  std::uint64_t first_line = 0;  // lines [first_line, end_line) of the array
  std::uint64_t end_line = 0;
  std::uint64_t chunk_line = 0;  // first line of the part in flight
  std::uint64_t window = 0;      // first queue ticket of its commands
  std::uint32_t slots[rounds] = {};  // this lane's cache slot in each round
  std::uint32_t pair = 0;            // queue pair of the window
  // The lanes that posted the batch (0: never posted). wait() and release()
  // work over these lanes, not over whichever lanes happen to be converged
  // when they are called: the part geometry (chunk_lines), each lane's
  // lines (its rank) and its queue tickets (rank in each round's ballot)
  // were all derived from this mask at the post.
  std::uint32_t mask = 0;
  std::uint32_t chunk_lines = 0;     // lines in one part
  std::uint8_t busy = 0;      // rounds in which this lane has a command posted
  std::uint8_t deferred = 0;  // rounds whose line wait() looks up the ordinary way
  std::uint8_t held = 0;      // rounds in which this lane holds a pin of the part
  std::uint8_t flags = 0;

  // Whether wait() still has commands to collect.
  WARPSTORE_HD bool in_flight() const { return (flags & pending) != 0; }
  // Whether a line of the batch failed (wait() says so too).
  WARPSTORE_HD bool has_failed() const { return (flags & failed) != 0; }
  // Lines the batch covers.
  WARPSTORE_HD std::uint64_t lines() const { return end_line - first_line; }
};

}  // namespace warpstore
