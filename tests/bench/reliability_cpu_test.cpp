// The reliability scenarios as tests on the CPU target: every fault kind is
// reported (or, for late completions, served right), nothing hangs, no wrong
// value gets through, the file reopens; every hostile input is refused.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "bench/reliability/cpu_reader.h"
#include "support/pattern_file.h"

using namespace warpstore;
using namespace warpstore::reliability;

namespace {

std::string scratch_dir() {
  const char* d = std::getenv("TMPDIR");
  return d ? d : "/tmp";
}

class FaultKind : public ::testing::TestWithParam<fault_kind> {};

}  // namespace

TEST_P(FaultKind, DetectedNoHangNoWrongBytesReopens) {
  const std::string path = scratch_dir() + "/warpstore-fault-test-" +
                           std::string(to_string(GetParam())) + ".bin";
  tools::write_pattern_file(path, 4 << 20, 0, 2, {}, false);
  fault_setup s;
  s.path = path;
  s.opts.cache_bytes = 128 << 10;
  s.opts.ways = 4;
  s.opts.service_threads = 2;
  s.opts.queue_pairs = 4;
  s.opts.queue_depth = 16;
  s.opts.direct = direct_io::off;
  // Generous: CI machines are small and busy, and a late-but-correct
  // completion must not be mistaken for a lost one.
  s.opts.timeout_ns = 5'000'000'000ull;
  s.reads = 6000;
  s.seed = 11;
  const fault_outcome o = run_fault(GetParam(), s, read_on_threads);
  std::remove(path.c_str());
  EXPECT_GT(o.injected, 0u);
  EXPECT_EQ(o.detected, o.injected) << o.message;
  EXPECT_EQ(o.hangs, 0u);
  EXPECT_EQ(o.mismatches, 0u);
  EXPECT_TRUE(o.reopened);
  if (GetParam() == fault_kind::delay || GetParam() == fault_kind::reorder) {
    EXPECT_EQ(o.failed_reads, 0u);
    EXPECT_TRUE(o.message.empty()) << o.message;
  } else {
    EXPECT_TRUE(o.error_named) << o.message;
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, FaultKind,
                         ::testing::Values(fault_kind::io_error, fault_kind::short_transfer,
                                           fault_kind::stall, fault_kind::delay,
                                           fault_kind::reorder, fault_kind::thread_death),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(HostileInputs, EveryCaseRefusedWithAPreciseError) {
  const auto cases = run_hostile(scratch_dir(), read_on_threads, write_on_threads, false);
  EXPECT_GE(cases.size(), 23u);
  for (const auto& c : cases)
    EXPECT_TRUE(c.refused_cleanly || c.skipped) << c.name << ": " << c.message;
}

// The permission cases are tried for real: as root in a child that drops
// to uid 65534, otherwise in the process itself. Where root cannot drop its
// privileges (a container without CAP_SETUID) they are "not tried", never
// passed.
TEST(HostileInputs, PermissionCasesAreTriedOrSaySoNeverPassedUntried) {
  const auto cases = run_hostile(scratch_dir(), read_on_threads, write_on_threads, false);
  int seen = 0;
  std::string untried;
  for (const auto& c : cases)
    if (c.name.find("permission") != std::string::npos) {
      ++seen;
      if (c.skipped) {
        EXPECT_FALSE(c.refused_cleanly) << c.name;
        EXPECT_EQ(c.message.rfind("not tried", 0), 0u) << c.name << ": " << c.message;
        untried += c.name + ": " + c.message + "; ";
      } else {
        EXPECT_TRUE(c.refused_cleanly) << c.name << ": " << c.message;
      }
    }
  EXPECT_EQ(seen, 2);
  if (!untried.empty()) GTEST_SKIP() << untried;
}

// A short read/write soak: every read checked against the model while it
// runs, and the whole file on disk equal to the model after each part.
TEST(SoakReadWrite, FileEqualsTheModelByteForByte) {
  rw_setup s;
  s.path = scratch_dir() + "/warpstore-soak-rw-test.bin";
  s.file_bytes = 8 << 20;
  s.cache_bytes = 256 << 10;  // 1/32
  s.writers = 4;
  s.ops = 300;
  s.rounds = 4;
  s.timeout_ns = 10'000'000'000ull;
  s.target = "cpu";
  tools::write_pattern_file(s.path, s.file_bytes, 0, 2, {}, false);
  const bench::result r = run_soak_readwrite(s, default_rw_parts(), cpu_rw_launcher());
  std::remove(s.path.c_str());
  const bench::json::value p(r.params);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_GT(p.find("read_bytes_checked")->as_integer(), 0);
  EXPECT_EQ(p.find("file_bytes_compared")->as_integer(), 4 * (8 << 20));
  EXPECT_GT(p.find("stores")->as_integer(), 0);
  EXPECT_GT(p.find("span_writes")->as_integer(), 0);
  EXPECT_EQ(p.find("errors")->as_integer(), 0) << p.find("error")->as_string();
  EXPECT_EQ(p.find("failed_ops")->as_integer(), 0);
  EXPECT_EQ(p.find("model_disagreements")->as_integer(), 0);
  EXPECT_GT(p.find("device_flushes")->as_integer(), 0);
}

TEST(FaultPolicy, ParsesKindsAndChoosesLbas) {
  EXPECT_EQ(parse_fault_kind("stall"), fault_kind::stall);
  EXPECT_THROW(parse_fault_kind("gremlins"), std::invalid_argument);
  fault_plan p;
  p.kind = fault_kind::io_error;
  p.lbas = {16};
  planned_faults f(p);
  const auto read = [](std::uint64_t slba, std::uint32_t blocks) {
    return nvme::make_rw(nvme::opcode::read, 0, 1, slba, blocks, 0);
  };
  EXPECT_EQ(f.before_execute(0, read(0, 8)).kind, fault_kind::none);   // blocks 0..7
  EXPECT_EQ(f.before_execute(0, read(12, 8)).kind, fault_kind::io_error);  // 12..19 holds 16
  EXPECT_EQ(f.before_execute(0, read(17, 8)).kind, fault_kind::none);
  EXPECT_EQ(f.before_execute(0, nvme::make_flush(0, 1)).kind, fault_kind::none);
  EXPECT_EQ(f.injected(), 1u);
  EXPECT_EQ(f.faulted_lbas(), std::vector<std::uint64_t>{12});
}
