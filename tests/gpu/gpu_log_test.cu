// The write-ahead log on the GPU: whole warps append entries of different
// sizes (the warp prefix sum, lines filled by several lanes, appends split
// into rounds), commit, and recover; partial transactions logged by GPU
// warps are undone; the key-value crash workload on the GPU library; and
// run_warps, the launch of the log's transfers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "test_files.h"
#include "write_cases.h"
#include "tests/crash/kv_workload.h"
#include "warpstore/cuda_check.h"
#include "warpstore/durable/log.cuh"
#include "warpstore/launch.cuh"

using namespace warpstore;
using namespace warpstore::durable;

namespace {

using test::temp_path;

__host__ __device__ std::uint32_t entry_size(std::uint64_t txn, unsigned lane) {
  return 8 + static_cast<std::uint32_t>((txn * 7 + lane * 13) % 25) * 8;  // 8 .. 200 bytes
}
__host__ __device__ std::uint64_t word(std::uint64_t txn, unsigned lane, std::uint32_t k) {
  return warpstore::detail::mix64(txn * 1000003 + lane * 64 + k);
}

__global__ void append_kernel(log_ref log, std::uint32_t txns_per_warp, unsigned* failed) {
  const std::uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  std::uint64_t p[25];
  for (std::uint32_t t = 0; t < txns_per_warp; ++t) {
    const std::uint64_t txn = std::uint64_t{warp} * 1000 + t + 1;
    const std::uint32_t n = entry_size(txn, lane);
    for (std::uint32_t k = 0; k < n / 8; ++k) p[k] = word(txn, lane, k);
    log_entry e;
    e.kind = entry_kind::record;
    e.txn = txn;
    e.target = lane;
    e.payload = p;
    e.payload_bytes = n;
    // Odd lanes only in odd transactions: a partial warp of appenders.
    const bool active = (t % 2 == 0) || (lane % 2 == 1);
    bool ok = log.append(0xFFFFFFFFu, warp, active, e);
    ok = log.commit(0xFFFFFFFFu, warp, txn, t + 1 == txns_per_warp) && ok;
    if (!ok && lane == 0) atomicAdd(failed, 1u);
  }
}

// Warp w logs the before-images of its 2 KiB of `data` (lane: 64 bytes),
// transaction w + 1; even warps commit.
__global__ void undo_kernel(log_ref log, const std::uint64_t* data, unsigned* failed) {
  const std::uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  log_entry e;
  e.kind = entry_kind::undo;
  e.txn = warp + 1;
  e.target = (std::uint64_t{warp} * 32 + lane) * 64;
  e.payload = data + e.target / 8;
  e.payload_bytes = 64;
  bool ok = log.append(0xFFFFFFFFu, warp, true, e);
  ok = log.write_tail(0xFFFFFFFFu, warp) && ok;
  ok = log.flush(0xFFFFFFFFu) && ok;
  if (warp % 2 == 0) ok = log.commit(0xFFFFFFFFu, warp, warp + 1) && ok;
  if (!ok && lane == 0) atomicAdd(failed, 1u);
}

class GpuLog : public ::testing::TestWithParam<controller_kind> {
 protected:
  void SetUp() override {
    opts_.controller = GetParam();
    opts_.writable = true;
    opts_.direct = direct_io::off;
    opts_.cache_bytes = 64 << 20;
    opts_.timeout_ns = 20'000'000'000ull;
    log_path_ = temp_path("log");
    data_path_ = temp_path("data");
    WARPSTORE_CUDA_TRY(cudaMalloc(&failed_, sizeof(unsigned)));
    WARPSTORE_CUDA_TRY(cudaMemset(failed_, 0, sizeof(unsigned)));
  }
  void TearDown() override {
    cudaFree(failed_);
    ::unlink(log_path_.c_str());
    ::unlink(data_path_.c_str());
  }
  void make_log(const log_layout& l) {
    ASSERT_EQ(::truncate(log_path_.c_str(), static_cast<off_t>(l.file_bytes())), 0);
    write_ahead_log::format(*make_controller(log_path_, opts_), l);
  }
  unsigned failures() {
    unsigned n = 0;
    WARPSTORE_CUDA_TRY(cudaMemcpy(&n, failed_, sizeof n, cudaMemcpyDeviceToHost));
    return n;
  }

  options opts_;
  std::string log_path_, data_path_;
  unsigned* failed_ = nullptr;
};

}  // namespace

TEST_P(GpuLog, WarpsAppendCommitAndScanBack) {
  const std::uint32_t warps = 512, txns = 6;
  log_layout l{4096, warps, 64 << 10};
  make_log(l);
  write_ahead_log log(make_controller(log_path_, opts_), opts_);
  log.recover(nullptr);
  append_kernel<<<warps / 4, 128>>>(log.ref(), txns, failed_);
  WARPSTORE_CUDA_TRY(cudaGetLastError());
  WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
  log.check();
  ASSERT_EQ(failures(), 0u);
  log.flush();
  std::uint32_t torn = 1;
  const std::vector<scanned_entry> entries = log.scan(&torn);
  EXPECT_EQ(torn, 0u);
  std::uint64_t bad = 0;
  std::size_t at = 0;
  for (std::uint32_t w = 0; w < warps && at < entries.size(); ++w)
    for (std::uint32_t t = 0; t < txns; ++t) {
      const std::uint64_t txn = std::uint64_t{w} * 1000 + t + 1;
      for (unsigned lane = 0; lane < 32; ++lane) {
        if (!((t % 2 == 0) || (lane % 2 == 1))) continue;
        if (at >= entries.size()) break;
        const scanned_entry& e = entries[at++];
        const std::uint32_t n = entry_size(txn, lane);
        bool ok = e.region == w && e.header.txn == txn && e.header.target == lane &&
                  e.header.payload_bytes == n;
        for (std::uint32_t k = 0; ok && k < n / 8; ++k) {
          std::uint64_t v;
          std::memcpy(&v, e.payload.data() + 8 * k, 8);
          ok = v == word(txn, lane, k);
        }
        bad += !ok;
      }
      if (at < entries.size())
        bad += entries[at++].header.kind != static_cast<std::uint8_t>(entry_kind::commit);
    }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(at, entries.size());
  EXPECT_EQ(entries.size(), std::size_t{warps} * (txns / 2 * 32 + txns / 2 * 16 + txns));
  write_ahead_log again(make_controller(log_path_, opts_), opts_);
  const recovery_report rep = again.recover(nullptr);
  EXPECT_EQ(rep.committed_txns, std::uint64_t{warps} * txns);
  EXPECT_EQ(rep.partial_txns, 0u);
}

TEST_P(GpuLog, PartialTransactionsOfGpuWarpsAreUndone) {
  const std::uint32_t warps = 256;
  const std::uint64_t bytes = std::uint64_t{warps} * 2048;
  std::vector<std::uint64_t> before(bytes / 8), after(bytes / 8);
  for (std::size_t i = 0; i < before.size(); ++i) {
    before[i] = warpstore::detail::mix64(i);
    after[i] = ~before[i];
  }
  {
    const int fd = ::open(data_path_.c_str(), O_WRONLY);
    ASSERT_EQ(::pwrite(fd, before.data(), bytes, 0), static_cast<ssize_t>(bytes));
    ::close(fd);
  }
  log_layout l{4096, warps, 16 << 10};
  make_log(l);
  {
    write_ahead_log log(make_controller(log_path_, opts_), opts_);
    log.recover(nullptr);
    std::uint64_t* d = nullptr;
    WARPSTORE_CUDA_TRY(cudaMalloc(&d, bytes));
    WARPSTORE_CUDA_TRY(cudaMemcpy(d, before.data(), bytes, cudaMemcpyHostToDevice));
    undo_kernel<<<warps / 4, 128>>>(log.ref(), d, failed_);
    WARPSTORE_CUDA_TRY(cudaGetLastError());
    WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
    cudaFree(d);
    log.check();
    ASSERT_EQ(failures(), 0u);
    log.flush();
    // The data changed everywhere (as the transactions' stores would);
    // then the crash.
    const int fd = ::open(data_path_.c_str(), O_WRONLY);
    ASSERT_EQ(::pwrite(fd, after.data(), bytes, 0), static_cast<ssize_t>(bytes));
    ::close(fd);
  }
  write_ahead_log log(make_controller(log_path_, opts_), opts_);
  const recovery_report rep = log.recover(make_controller(data_path_, opts_).get());
  EXPECT_EQ(rep.committed_txns, warps / 2);
  EXPECT_EQ(rep.partial_txns, warps / 2);
  EXPECT_EQ(rep.undone_entries, std::uint64_t{warps / 2} * 32);
  std::vector<std::uint64_t> got(bytes / 8);
  const int fd = ::open(data_path_.c_str(), O_RDONLY);
  ASSERT_EQ(::pread(fd, got.data(), bytes, 0), static_cast<ssize_t>(bytes));
  ::close(fd);
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool committed = (i / 256) % 2 == 0;  // 256 words per warp
    bad += got[i] != (committed ? after[i] : before[i]);
  }
  EXPECT_EQ(bad, 0u);
}

TEST_P(GpuLog, KeyValueWorkloadRecoversOnTheGpu) {
  crash::env e;
  const test::temp_dir dir("gpu-kv");
  e.dir = dir.path;
  e.opts = opts_;
  e.opts.cache_bytes = 256 << 10;
  e.open = [](const std::string& p, const options& o) { return make_controller(p, o); };
  e.seed = 3;
  auto w = crash::make_kv_workload();
  w->prepare(e);
  w->run(e, 5, [](std::uint64_t) {});
  crash::verdict v = w->recover(e);
  EXPECT_EQ(v.mismatches, 0u) << v.detail;
  EXPECT_EQ(v.state, 5u);
  for (const kv::crash_point p : {kv::crash_point::after_log, kv::crash_point::after_apply,
                                  kv::crash_point::after_data_flush}) {
    crash::kv_cut_batch(e, p);
    v = w->recover(e);
    EXPECT_EQ(v.mismatches, 0u) << v.detail;
    EXPECT_EQ(v.state, 5u);
  }
}

INSTANTIATE_TEST_SUITE_P(Controllers, GpuLog,
                         ::testing::Values(controller_kind::host, controller_kind::memory,
                                           controller_kind::nvme_model),
                         [](const ::testing::TestParamInfo<controller_kind>& i) {
                           return test::controller_test_name(i.param);
                         });

// run_warps (warpstore/launch.cuh), the launch the log's transfers use: every
// warp of [0, n) is called once, on all 32 of its lanes, with the n returned;
// no warp past n is called.
namespace {

struct record_lanes {
  unsigned* calls;          // [capacity * 32]: calls of each lane of each warp
  std::uint64_t* ns;        // [capacity * 32]: the n each lane was given
  unsigned* odd;            // calls past capacity, or from a warp not whole
  std::uint64_t capacity;   // warps recorded

  __device__ void operator()(std::uint64_t w, std::uint64_t n) const {
    const unsigned lane = warpstore::detail::warp::lane();
    if (w >= capacity || __activemask() != warpstore::detail::warp::whole) {
      atomicAdd(odd, 1u);
      return;
    }
    atomicAdd(&calls[w * 32 + lane], 1u);
    ns[w * 32 + lane] = n;
  }
};

// run_warps<MaxRegisters>(warps, ...) over `capacity` recorded warps: checks
// the calls and returns n.
template <unsigned MaxRegisters = 0>
std::uint64_t expect_each_warp_once(std::uint64_t warps, unsigned block_threads,
                                    std::uint64_t capacity) {
  auto calls = runtime::make_device<unsigned>(capacity * 32);
  auto ns = runtime::make_device<std::uint64_t>(capacity * 32);
  auto odd = runtime::make_device<unsigned>(1);
  const std::uint64_t n = run_warps<MaxRegisters>(
      warps, record_lanes{calls.get(), ns.get(), odd.get(), capacity}, block_threads);
  std::vector<unsigned> c(capacity * 32);
  std::vector<std::uint64_t> got(capacity * 32);
  unsigned o = 0;
  runtime::copy_to_host(c.data(), calls.get(), c.size() * sizeof(unsigned));
  runtime::copy_to_host(got.data(), ns.get(), got.size() * sizeof(std::uint64_t));
  runtime::copy_to_host(&o, odd.get(), sizeof o);
  EXPECT_EQ(o, 0u) << "calls past the warps recorded or from a partial warp";
  EXPECT_LE(n, capacity);
  std::uint64_t wrong = 0;
  for (std::uint64_t i = 0; i < c.size(); ++i) {
    const bool in = i / 32 < n;
    wrong += c[i] != (in ? 1u : 0u) || (in && got[i] != n);
  }
  EXPECT_EQ(wrong, 0u) << "lanes called other than once with n, of " << warps << " warps asked, "
                       << block_threads << " threads per block";
  return n;
}

}  // namespace

TEST(GpuRunWarps, EveryWarpOnceOnAllLanesWithTheN) {
  static_assert(lanes_per_warp == 32);
  for (const unsigned block_threads : {32u, 96u, 256u, 1024u})
    for (const std::uint64_t warps : {std::uint64_t{1}, std::uint64_t{7}, std::uint64_t{1000}})
      EXPECT_EQ(expect_each_warp_once(warps, block_threads, warps + 64), warps)
          << block_threads << " threads per block";
}

TEST(GpuRunWarps, ZeroWarpsFillTheGpu) {
  // At most 2048 threads (64 warps) stay resident on a multiprocessor.
  const std::uint64_t most = std::uint64_t{runtime::processor_count()} * 64;
  const std::uint64_t n = expect_each_warp_once(0, 256, most);
  EXPECT_GE(n, runtime::processor_count() * std::uint64_t{8})
      << "a block of 8 warps per multiprocessor at least";
  EXPECT_EQ(n % 8, 0u);
}

TEST(GpuRunWarps, ARegisterCapRunsEveryWarpOnceAndFillsTheGpu) {
  // The capped kernel (run_warps<R>) calls the same warps; at 32 registers a
  // lane a multiprocessor holds its 2048 threads, 64 warps.
  for (const std::uint64_t warps : {std::uint64_t{1}, std::uint64_t{1000}})
    EXPECT_EQ(expect_each_warp_once<32>(warps, 256, warps + 64), warps);
  const std::uint64_t most = std::uint64_t{runtime::processor_count()} * 64;
  EXPECT_EQ(expect_each_warp_once<32>(0, 256, most), most);
}

TEST(GpuRunWarps, BlockThreadsMustBeWholeWarps) {
  auto odd = runtime::make_device<unsigned>(1);
  const record_lanes body{nullptr, nullptr, odd.get(), 0};
  for (const unsigned bad : {0u, 16u, 100u})
    EXPECT_THROW(run_warps(4, body, bad), std::invalid_argument) << bad;
  unsigned o = 0;
  runtime::copy_to_host(&o, odd.get(), sizeof o);
  EXPECT_EQ(o, 0u) << "nothing launched";
}
