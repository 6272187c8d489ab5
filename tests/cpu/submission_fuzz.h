// What both submission fuzzers share (tests/cpu/submission_fuzz_test.cpp, a
// seeded loop run in every test pass, and tests/fuzz/submission_fuzzer.cpp,
// the libFuzzer target): how an arbitrary entry is made from a stream of
// words, which entries a correct controller over a read-only file must
// accept, and the check of one completion against the entry it answers.
#pragma once

#include <cstdint>
#include <string>

#include "support/pattern_file.h"
#include "warpstore/nvme.h"
#include "warpstore/queue.cuh"

namespace warpstore::test {

// One entry from `next()` (any source of 64-bit words): a third random
// words, a third a random opcode on namespace 1, a third a READ into the
// staging slot of `slot` with a random (often bad) range. The cid is left
// as the words made it; submitters that follow the protocol set it.
template <class Next>
nvme::command fuzz_entry(Next&& next, const queue_pair_ref& qp, std::uint32_t slot,
                         std::uint64_t capacity) {
  nvme::command c{};
  auto* words = reinterpret_cast<std::uint64_t*>(&c);
  switch (next() % 3) {
    case 0:
      for (unsigned i = 0; i < sizeof c / 8; ++i) words[i] = next();
      break;
    case 1:
      for (unsigned i = 0; i < sizeof c / 8; ++i) words[i] = next();
      c.opc = static_cast<std::uint8_t>(next() % 4);  // flush, write, read, 3
      c.nsid = next() % 8 == 0 ? 0xFFFFFFFFu : 1;
      c.flags = next() % 8 == 0 ? 1 : 0;
      break;
    default: {
      const std::uint64_t slba = next() % (capacity + 16);
      const std::uint32_t blocks = 1 + static_cast<std::uint32_t>(next() % 10);  // 9, 10: > slot
      c = nvme::make_rw(nvme::opcode::read, static_cast<std::uint16_t>(slot), 1, slba, blocks,
                        reinterpret_cast<std::uint64_t>(qp.staging_of(slot)));
    }
  }
  return c;
}

// A READ any controller must serve: namespace 1, in range, fits the slot,
// data pointer at the staging slot of its own command id.
inline bool good_read(const nvme::command& c, const queue_pair_ref& qp, std::uint64_t capacity) {
  return c.opc == static_cast<std::uint8_t>(nvme::opcode::read) && c.nsid == 1 && c.flags == 0 &&
         c.cid < qp.depth && c.prp1 == reinterpret_cast<std::uint64_t>(qp.staging_of(c.cid)) &&
         c.slba() < capacity && c.nlb() <= capacity - c.slba() &&
         c.nlb() * nvme::block_size <= qp.slot_bytes;
}

// Whether a correct controller over a read-only file (gpu_pull delivery)
// completes `c` with success: a good READ, or a FLUSH of namespace 1 or of
// all. Everything else (WRITE to a read-only open, bad ranges, bad
// pointers, other namespaces, fused or SGL flags, unknown opcodes) must
// come back with an error status.
inline bool must_succeed(const nvme::command& c, const queue_pair_ref& qp, std::uint64_t capacity) {
  if (c.opc == static_cast<std::uint8_t>(nvme::opcode::flush))
    return c.flags == 0 && (c.nsid == 1 || c.nsid == 0xFFFFFFFFu);
  return good_read(c, qp, capacity);
}

// Checks the completion `dw3` of entry `c`: success exactly when it must
// succeed; a good READ (when `check_data`: its staging slot was not shared
// with another command in flight) delivered the file's bytes. Returns "" or
// what went wrong.
inline std::string check_completion(const nvme::command& c, std::uint32_t dw3,
                                    const queue_pair_ref& qp, std::uint64_t capacity,
                                    std::uint64_t file_bytes, bool check_data) {
  const nvme::status st = nvme::dw3_status(dw3);
  const bool want = must_succeed(c, qp, capacity);
  const std::string what = "opcode " + std::to_string(c.opc) + " nsid " + std::to_string(c.nsid) +
                           " cid " + std::to_string(c.cid) + " LBA " + std::to_string(c.slba()) +
                           " blocks " + std::to_string(c.nlb());
  if (want && !st.success()) return "valid command refused: " + what;
  if (!want && st.success()) return "invalid command accepted: " + what;
  if (want && check_data && good_read(c, qp, capacity)) {
    const std::uint64_t off = c.slba() * nvme::block_size;
    const std::uint64_t n = std::min<std::uint64_t>(c.nlb() * nvme::block_size, file_bytes - off);
    if (tools::count_mismatches(qp.staging_of(c.cid), off, n) != 0)
      return "good read delivered wrong bytes: " + what;
  }
  return {};
}

}  // namespace warpstore::test
