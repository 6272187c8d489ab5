// The parts of the I/O-methods comparison that need no GPU: percentiles,
// process CPU time, the pread and mmap methods against a pattern file (into
// host memory), the io_uring ceiling's latencies, and loading libcufile.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>

#include "bench/ceilings/uring_reader.h"
#include "bench/iomethods/cpu_methods.h"
#include "bench/iomethods/cufile.h"
#include "bench/iomethods/measure.h"
#include "support/pattern_file.h"

namespace wb = warpstore::bench;
namespace io = warpstore::bench::iomethods;

namespace {

constexpr std::uint64_t file_seed = 11;

// A pattern file in a fresh directory, removed at the end of the test.
class pattern_file_fixture {
 public:
  explicit pattern_file_fixture(std::uint64_t bytes) : bytes_(bytes) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/warpstore-iomethods-test-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    warpstore::tools::write_pattern_file(path(), bytes, file_seed, 2, {}, false);
  }
  ~pattern_file_fixture() { std::filesystem::remove_all(dir_); }
  std::string path() const { return dir_ + "/data.bin"; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  std::string dir_;
  std::uint64_t bytes_;
};

io::cpu_method_config config_for(const pattern_file_fixture& f, wb::trace tr, std::uint32_t request,
                                 std::uint64_t requests, std::uint64_t slots) {
  io::cpu_method_config c;
  c.path = f.path();
  c.threads = 3;
  c.request_bytes = request;
  c.requests = requests;
  c.tr = tr;
  c.file_seed = file_seed;
  c.slots = slots;
  return c;
}

// Delivers like host_destination but flips one byte of the first copy: the
// verification must see it.
class corrupting_destination final : public io::destination {
 public:
  corrupting_destination(std::uint64_t bytes, unsigned threads, std::size_t staging)
      : inner_(bytes, threads, staging) {}
  std::byte* staging(unsigned t, unsigned b) override { return inner_.staging(t, b); }
  std::size_t staging_bytes() const override { return inner_.staging_bytes(); }
  void copy(unsigned t, unsigned b, std::uint64_t off, const std::byte* src,
            std::size_t n) override {
    inner_.copy(t, b, off, src, n);
    if (!done_.exchange(true)) inner_.data()[off] ^= std::byte{0x5A};
  }
  void wait(unsigned t, unsigned b) override { inner_.wait(t, b); }
  std::uint64_t verify(const wb::trace& tr, std::uint64_t first, std::uint64_t count,
                       std::uint32_t request, std::uint64_t seed) override {
    return inner_.verify(tr, first, count, request, seed);
  }

 private:
  io::host_destination inner_;
  std::atomic<bool> done_{false};
};

}  // namespace

TEST(Percentiles, NearestRank) {
  std::vector<float> us(1000);
  std::iota(us.begin(), us.end(), 1.0f);  // 1 .. 1000
  std::reverse(us.begin(), us.end());     // summarize sorts
  const io::latency_summary s = io::summarize(us);
  EXPECT_EQ(s.samples, 1000u);
  EXPECT_EQ(s.p50_us, 500.0);
  EXPECT_EQ(s.p99_us, 990.0);
  EXPECT_EQ(s.p999_us, 999.0);
  EXPECT_EQ(s.max_us, 1000.0);
}

TEST(Percentiles, SmallAndEmpty) {
  std::vector<float> one{7.0f};
  const io::latency_summary s = io::summarize(one);
  EXPECT_EQ(s.p50_us, 7.0);
  EXPECT_EQ(s.p999_us, 7.0);
  std::vector<float> none;
  EXPECT_EQ(io::summarize(none).samples, 0u);
  EXPECT_THROW(io::percentile(none, 0.5), std::invalid_argument);
  EXPECT_THROW(io::percentile(one, 0.0), std::invalid_argument);
}

// getrusage(RUSAGE_SELF) counts every thread of the process: a busy helper
// thread shows up in the meter of the thread that waits for it.
TEST(CpuMeter, CountsOtherThreads) {
  const io::cpu_meter meter;
  // Spins until it has used 0.2 s of its own CPU time (not wall time: CI shares its cores).
  std::thread busy([] {
    auto thread_cpu = [] {
      timespec ts{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
    };
    const double start = thread_cpu();
    volatile std::uint64_t x = 0;
    while (thread_cpu() - start < 0.2) x = x + 1;
  });
  busy.join();
  EXPECT_GE(meter.seconds(), 0.19);
  EXPECT_LT(meter.seconds(), 30.0);
}

TEST(PreadMethod, RandomRequestsInRoundsAllVerified) {
  const pattern_file_fixture f(std::uint64_t{8} << 20);
  const auto tr = wb::trace::uniform(5, f.bytes() / 4096);
  const auto cfg = config_for(f, tr, 4096, 1000, 384);  // 3 rounds, the last one short
  io::host_destination dst(cfg.slots * 4096, cfg.threads, 16 * 4096);
  const io::method_result r = io::run_pread_method(cfg, dst);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(r.rounds, 3u);
  EXPECT_EQ(r.latency.samples, 1000u);
  EXPECT_EQ(r.bytes, 1000u * 4096);
  EXPECT_GT(r.gbps, 0);
  EXPECT_GT(r.latency.p50_us, 0);
  EXPECT_LE(r.latency.p50_us, r.latency.p99_us);
  EXPECT_LE(r.latency.p99_us, r.latency.p999_us);
  EXPECT_GE(r.cpu_seconds, 0);
}

TEST(PreadMethod, SequentialLargeRequests) {
  const pattern_file_fixture f(std::uint64_t{8} << 20);
  const auto tr = wb::trace::sequential(f.bytes() / (128 << 10));
  const auto cfg = config_for(f, tr, 128 << 10, 100, 40);  // wraps around the file
  io::host_destination dst(cfg.slots * (128 << 10), cfg.threads, 2 * (128 << 10));
  const io::method_result r = io::run_pread_method(cfg, dst);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(r.latency.samples, 100u);
}

TEST(PreadMethod, CorruptionIsCounted) {
  const pattern_file_fixture f(std::uint64_t{1} << 20);
  const auto cfg = config_for(f, wb::trace::uniform(3, f.bytes() / 4096), 4096, 200, 200);
  corrupting_destination dst(cfg.slots * 4096, cfg.threads, 8 * 4096);
  EXPECT_EQ(io::run_pread_method(cfg, dst).mismatches, 1u);
}

TEST(PreadMethod, StagingTooSmallOrTraceTooLong) {
  const pattern_file_fixture f(std::uint64_t{1} << 20);
  auto cfg = config_for(f, wb::trace::uniform(3, f.bytes() / 4096), 4096, 10, 10);
  io::host_destination small(cfg.slots * 4096, cfg.threads, 1024);
  EXPECT_THROW(io::run_pread_method(cfg, small), std::invalid_argument);
  cfg.tr = wb::trace::uniform(3, f.bytes() / 4096 + 1);  // one block past the end
  io::host_destination dst(cfg.slots * 4096, cfg.threads, 4096);
  EXPECT_THROW(io::run_pread_method(cfg, dst), std::invalid_argument);
}

TEST(PreadMethod, MissingFileNamesIt) {
  io::cpu_method_config cfg;
  cfg.path = "/nonexistent/warpstore-iomethods.bin";
  cfg.requests = 1;
  cfg.slots = 1;
  io::host_destination dst(4096, 1, 4096);
  try {
    io::run_pread_method(cfg, dst);
    FAIL() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/warpstore-iomethods.bin"),
              std::string::npos);
  }
}

TEST(MmapMethod, RandomAndSequentialVerified) {
  const pattern_file_fixture f(std::uint64_t{8} << 20);
  for (const std::uint32_t request : {4096u, 128u << 10}) {
    const auto tr = request == 4096 ? wb::trace::uniform(9, f.bytes() / request)
                                    : wb::trace::sequential(f.bytes() / request);
    const auto cfg = config_for(f, tr, request, 300, 128);
    io::host_destination dst(cfg.slots * request, cfg.threads, request);
    const io::method_result r = io::run_mmap_method(cfg, dst);
    EXPECT_EQ(r.mismatches, 0u) << request;
    EXPECT_EQ(r.latency.samples, 300u) << request;
    EXPECT_EQ(r.rounds, 3u) << request;
  }
}

// A failure in one thread is raised once every thread is done (no hang at the barrier).
TEST(Rounds, ThreadFailureIsRaised) {
  const pattern_file_fixture f(std::uint64_t{1} << 20);
  const auto cfg = config_for(f, wb::trace::uniform(3, f.bytes() / 4096), 4096, 90, 30);
  io::host_destination dst(cfg.slots * 4096, cfg.threads, 4096);
  EXPECT_THROW(io::run_rounds(cfg, dst,
                              [](unsigned t, std::uint64_t, std::uint64_t, std::uint64_t,
                                 std::vector<float>&) {
                                if (t == 1) throw std::runtime_error("thread 1 failed");
                              }),
               std::runtime_error);
}

TEST(UringCeiling, RecordsOneLatencyPerRequest) {
  const pattern_file_fixture f(std::uint64_t{8} << 20);
  wb::uring_reader_config c;
  c.path = f.path();
  c.threads = 2;
  c.queue_depth = 16;
  c.block_bytes = 4096;
  c.requests = 3000;
  c.trace = wb::trace::uniform(4, f.bytes() / 4096);
  c.file_seed = file_seed;
  c.record_latency = true;
  c.arena_bytes = 1000 * 4096;  // 3 rounds
  const wb::uring_reader_result r = wb::run_uring_reader(c);
  EXPECT_EQ(r.errors, 0u) << r.first_error;
  EXPECT_EQ(r.mismatches, 0u);
  ASSERT_EQ(r.latency_us.size(), 3000u);
  std::vector<float> lat = r.latency_us;
  const io::latency_summary s = io::summarize(lat);
  EXPECT_GT(s.p50_us, 0);
  EXPECT_GE(r.cpu_seconds, 0);
}

// Writes go to a sparse target of the file's size: a request not written
// reads back as zeros and fails the check.
class write_target {
 public:
  explicit write_target(const pattern_file_fixture& f) : path_(f.path() + ".target") {
    io::make_write_target(path_, f.bytes());
  }
  ~write_target() { io::discard_write_target(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(WriteMethods, PwriteMmapAndUringWriteThePattern) {
  const pattern_file_fixture f(std::uint64_t{8} << 20);
  for (const std::uint32_t request : {4096u, 128u << 10}) {
    const auto tr = request == 4096 ? wb::trace::uniform(21, f.bytes() / request)
                                    : wb::trace::sequential(f.bytes() / request);
    {
      const write_target target(f);
      auto cfg = config_for(f, tr, request, 200, 64);  // 4 rounds
      cfg.path = target.path();
      io::host_source src(cfg.slots * request, cfg.threads, 4 * request);
      const io::method_result r = io::run_pwrite_method(cfg, src);
      EXPECT_EQ(r.mismatches, 0u) << request;
      EXPECT_EQ(r.latency.samples, 200u) << request;
      EXPECT_EQ(r.rounds, 4u) << request;
    }
    {
      const write_target target(f);
      auto cfg = config_for(f, tr, request, 150, 64);
      cfg.path = target.path();
      io::host_source src(cfg.slots * request, cfg.threads, request);
      const io::method_result r = io::run_mmap_write_method(cfg, src);
      EXPECT_EQ(r.mismatches, 0u) << request;
      EXPECT_EQ(r.latency.samples, 150u) << request;
    }
    {
      const write_target target(f);
      auto cfg = config_for(f, tr, request, 300, 100);
      cfg.path = target.path();
      std::vector<std::byte> arena(cfg.slots * request);
      const io::method_result r = io::run_uring_write_method(cfg, 8, arena.data());
      EXPECT_EQ(r.mismatches, 0u) << request;
      EXPECT_EQ(r.latency.samples, 300u) << request;
      EXPECT_EQ(r.rounds, 3u) << request;
    }
  }
}

// A source that never gets the pattern (fill does nothing): every request
// writes zeros and the read-back finds each one wrong.
TEST(WriteMethods, WrongBytesAreCounted) {
  const pattern_file_fixture f(std::uint64_t{1} << 20);
  class unfilled_source final : public io::source {
   public:
    explicit unfilled_source(std::uint64_t bytes) : inner_(bytes, 3, 4096) {}
    std::byte* staging(unsigned t, unsigned b) override { return inner_.staging(t, b); }
    std::size_t staging_bytes() const override { return inner_.staging_bytes(); }
    void fetch(unsigned t, unsigned b, std::uint64_t off, std::byte* dst, std::size_t n) override {
      inner_.fetch(t, b, off, dst, n);
    }
    void wait(unsigned t, unsigned b) override { inner_.wait(t, b); }
    void fill(const wb::trace&, std::uint64_t, std::uint64_t, std::uint32_t,
              std::uint64_t) override {}

   private:
    io::host_source inner_;
  };
  const write_target target(f);
  auto cfg = config_for(f, wb::trace::sequential(f.bytes() / 4096), 4096, 10, 10);
  cfg.path = target.path();
  unfilled_source src(cfg.slots * 4096);
  // Pattern words that happen to be zero would pass; the pattern has none here.
  EXPECT_EQ(io::run_pwrite_method(cfg, src).mismatches, 10u * 4096 / 8);
}

TEST(WriteMethods, MissingTargetNamesIt) {
  const pattern_file_fixture f(std::uint64_t{1} << 20);
  auto cfg = config_for(f, wb::trace::sequential(f.bytes() / 4096), 4096, 10, 10);
  cfg.path = f.path() + ".absent";
  io::host_source src(cfg.slots * 4096, cfg.threads, 4096);
  try {
    io::run_pwrite_method(cfg, src);
    FAIL() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find(".absent"), std::string::npos) << e.what();
  }
}

// The CI machine has no libcufile: loading must say why instead of failing
// the build or the process; where it is present its entry points resolve.
TEST(CuFile, LoadsOrSaysWhyNot) {
  std::string why;
  const auto lib = io::cufile_library::load(why);
  if (lib) {
    EXPECT_TRUE(why.empty());
    EXPECT_FALSE(lib->path().empty());
  } else {
    EXPECT_NE(why.find("libcufile"), std::string::npos) << why;
  }
}

TEST(CuFile, ErrorNamesCallAndCodes) {
  const io::cufile_error e("cuFileHandleRegister", 5027, 0);
  EXPECT_EQ(e.err(), 5027);
  EXPECT_NE(std::string(e.what()).find("cuFileHandleRegister failed: CUfileOpError 5027"),
            std::string::npos);
  const io::cufile_error d("cuFileDriverOpen", 5011, 100);
  EXPECT_NE(std::string(d.what()).find("CUresult 100"), std::string::npos);
}
