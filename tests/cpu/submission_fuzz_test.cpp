// Fuzzing the host controller with arbitrary submission entries: random
// bytes, random opcodes, and plausible READs with random ranges, written
// straight into the SQ (support/raw_queue.h). Every entry must complete
// within the deadline with its own queue id; a READ the controller accepts
// must have delivered the file's bytes; nothing may crash or stop the
// controller. Runs for WARPSTORE_FUZZ_SECONDS (default 10).
//
// Only gpu_pull delivery is fuzzed: there the controller writes nothing but
// its own staging slots, whatever PRP1 says. Under copy_engine it copies to
// PRP1, as a device DMAs wherever a command points: a random PRP1 is not an
// input the controller can defend against without an IOMMU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "controller/host_controller.h"
#include "submission_fuzz.h"
#include "support/pattern_file.h"
#include "support/raw_queue.h"
#include "test_files.h"

using namespace warpstore;

namespace {

double fuzz_seconds() {
  const char* v = std::getenv("WARPSTORE_FUZZ_SECONDS");
  return v && *v ? std::stod(v) : 10.0;
}

}  // namespace

TEST(SubmissionFuzz, ArbitraryEntriesAllCompleteAndGoodReadsDeliver) {
  const std::uint64_t file_bytes = (1 << 20) + 700;  // a partial last block
  test::pattern_file f(file_bytes);
  options o;
  o.queue_pairs = 1;
  o.queue_depth = 16;
  o.service_threads = 1;
  o.direct = direct_io::off;
  o.deliver = delivery::gpu_pull;
  host_controller ctl(std::make_shared<backing_file>(f.path(), o.direct), o, 4096);
  const queue_pair_ref& qp = ctl.queues().view(0);
  const std::uint64_t capacity = ctl.file().capacity_blocks();
  test::raw_queue q(qp);

  std::mt19937_64 rng(2026);
  std::uint32_t sq_index = 0, cq_index = 0;
  bool phase = true;
  std::uint64_t fed = 0, delivered = 0;
  std::vector<nvme::command> batch;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(fuzz_seconds());
  while (std::chrono::steady_clock::now() < end) {
    const std::uint32_t k = 1 + static_cast<std::uint32_t>(rng() % (qp.depth - 1));
    batch.clear();
    for (std::uint32_t i = 0; i < k; ++i) {
      nvme::command c = test::fuzz_entry([&] { return rng(); }, qp, sq_index, capacity);
      c.cid = static_cast<std::uint16_t>(sq_index);  // what push() writes
      batch.push_back(c);
      q.push(c);
      sq_index = (sq_index + 1) % qp.depth;
    }
    q.ring_sq();
    for (std::uint32_t i = 0; i < k; ++i) {
      ASSERT_TRUE(q.wait_phase(cq_index, phase)) << "entry " << fed + i << " never completed";
      const nvme::completion& e = q.cqe(cq_index);
      const std::uint32_t w = q.dw3(cq_index);
      ASSERT_EQ(e.sq_id, qp.qid);
      const std::uint16_t cid = nvme::dw3_cid(w);
      // Completions may come in any order: find the entry by its command id.
      const nvme::command* c = nullptr;
      for (const auto& b : batch) c = b.cid == cid ? &b : c;
      ASSERT_NE(c, nullptr) << "completion for cid " << cid << " that was not submitted";
      const std::string bad = test::check_completion(*c, w, qp, capacity, file_bytes, true);
      ASSERT_TRUE(bad.empty()) << "entry " << fed + i << ": " << bad;
      delivered += test::good_read(*c, qp, capacity);
      cq_index = (cq_index + 1) % qp.depth;
      if (cq_index == 0) phase = !phase;
    }
    q.retire(k);
    fed += k;
  }
  EXPECT_NO_THROW(ctl.check());
  EXPECT_EQ(ctl.stats().commands, fed);
  std::printf("submission fuzz: %llu entries fed, %llu good reads verified\n",
              static_cast<unsigned long long>(fed), static_cast<unsigned long long>(delivered));
}
