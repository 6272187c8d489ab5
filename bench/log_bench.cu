// Log append throughput: GPU warps appending transactions (32 entries of
// 64 bytes and a commit record each, by default) to the write-ahead log's
// lock-free per-warp regions, against the same transactions appended to one
// shared tail under a single device-scope lock (a ticket lock, so waits are
// FIFO and bounded): same warps, same file, same entry format, same flush
// policy. Each run is timed to durable (the host's log flush at the end),
// then the whole log is read back through the queues and every entry of
// every transaction checked.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/subcommands.h"
#include "support/setting_options.h"
#include "support/gpu.cuh"
#include "support/timing.h"
#include "warpstore/durable/log.cuh"

namespace warpstore::bench {

namespace {

constexpr unsigned log_block_threads = 128;

struct bench_shape {
  std::uint64_t txns;           // transactions in all
  std::uint32_t per_txn;        // entries per transaction (one per lane)
  std::uint32_t payload_bytes;  // per entry
  std::uint32_t flush_every;    // a warp FLUSHes after every n-th of its transactions (0: never)
};

// Payload word `k` of entry `lane` of transaction `txn`.
__host__ __device__ inline std::uint64_t payload_word(std::uint64_t txn, std::uint32_t lane,
                                                      std::uint32_t k) {
  return warpstore::detail::mix64(txn * 0x100000001B3ull + lane * 64 + k);
}

// Fills this lane's payload (up to 256 bytes) and appends it.
__device__ bool append_entry(const durable::log_ref& log, unsigned mask, std::uint32_t region,
                             bool active, std::uint64_t txn, std::uint32_t lane,
                             const bench_shape& s) {
  std::uint64_t p[32];
  for (std::uint32_t k = 0; k < s.payload_bytes / 8; ++k) p[k] = payload_word(txn, lane, k);
  durable::log_entry e;
  e.kind = durable::entry_kind::record;
  e.txn = txn;
  e.target = lane;
  e.payload = p;
  e.payload_bytes = s.payload_bytes;
  return log.append(mask, region, active, e);
}

// Lock-free: warp w appends transactions w, w + warps, ... to its own region.
__global__ void regions_kernel(durable::log_ref log, bench_shape s, unsigned* failed) {
  const std::uint64_t warp = (std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const std::uint64_t warps = std::uint64_t{gridDim.x} * blockDim.x / 32;
  const unsigned mask = 0xFFFFFFFFu, lane = threadIdx.x % 32;
  std::uint64_t done = 0;
  for (std::uint64_t t = warp; t < s.txns; t += warps) {
    bool ok = append_entry(log, mask, static_cast<std::uint32_t>(warp), lane < s.per_txn, t + 1,
                           lane, s);
    ++done;
    const bool durable = s.flush_every != 0 && done % s.flush_every == 0;
    ok = log.commit(mask, static_cast<std::uint32_t>(warp), t + 1, durable) && ok;
    if (!ok) {
      if (lane == 0) atomicAdd(failed, 1u);
      return;
    }
  }
}

struct ticket_lock {
  unsigned long long next;
  unsigned long long serving;
  unsigned abort;
};

// The leader takes a ticket and waits (bounded) for its turn; the warp's
// lanes then see everything the previous holder wrote.
__device__ bool lock_acquire(ticket_lock* l, std::uint64_t timeout_ns) {
  unsigned ok = 1;
  if (threadIdx.x % 32 == 0) {
    const unsigned long long me =
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(l->next).fetch_add(
            1, cuda::std::memory_order_relaxed);
    warpstore::detail::deadline dl(timeout_ns);
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> serving(l->serving);
    cuda::atomic_ref<unsigned, cuda::thread_scope_device> abort(l->abort);
    while (serving.load(cuda::std::memory_order_acquire) != me) {
      if (abort.load(cuda::std::memory_order_relaxed) != 0 || dl.expired()) {
        abort.store(1, cuda::std::memory_order_relaxed);
        ok = 0;
        break;
      }
      __nanosleep(64);
    }
  }
  ok = __shfl_sync(0xFFFFFFFFu, ok, 0);
  cuda::atomic_thread_fence(cuda::std::memory_order_acquire, cuda::thread_scope_device);
  return ok != 0;
}

__device__ void lock_release(ticket_lock* l) {
  cuda::atomic_thread_fence(cuda::std::memory_order_release, cuda::thread_scope_device);
  __syncwarp();
  if (threadIdx.x % 32 == 0)
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(l->serving)
        .fetch_add(1, cuda::std::memory_order_release);
}

// One global lock around appending to the one shared tail (region 0) and
// writing what was appended: per transaction, or (per_entry) per entry.
__global__ void global_lock_kernel(durable::log_ref log, bench_shape s, ticket_lock* lock,
                                   bool per_entry, std::uint64_t timeout_ns, unsigned* failed) {
  const std::uint64_t warp = (std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const std::uint64_t warps = std::uint64_t{gridDim.x} * blockDim.x / 32;
  const unsigned mask = 0xFFFFFFFFu, lane = threadIdx.x % 32;
  std::uint64_t done = 0;
  for (std::uint64_t t = warp; t < s.txns; t += warps) {
    bool ok = true;
    if (per_entry) {
      for (std::uint32_t k = 0; k < s.per_txn && ok; ++k) {
        if (!lock_acquire(lock, timeout_ns)) {
          ok = false;
          break;
        }
        ok = append_entry(log, mask, 0, lane == k, t + 1, lane, s);
        ok = log.write_tail(mask, 0) && ok;
        lock_release(lock);
      }
      if (ok && (ok = lock_acquire(lock, timeout_ns))) {
        ok = log.commit(mask, 0, t + 1, false);
        lock_release(lock);
      }
    } else if ((ok = lock_acquire(lock, timeout_ns))) {
      ok = append_entry(log, mask, 0, lane < s.per_txn, t + 1, lane, s);
      ok = log.commit(mask, 0, t + 1, false) && ok;
      lock_release(lock);
    }
    ++done;
    if (ok && s.flush_every != 0 && done % s.flush_every == 0) ok = log.flush(mask);
    if (!ok) {
      if (lane == 0) atomicAdd(failed, 1u);
      return;
    }
  }
}

std::string bench_log_path(const parsed_args& args) {
  return args.str("log").empty() ? "/tmp/warpstore-log-bench.log" : args.str("log");
}

void make_file(const std::string& path, std::uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("log bench: cannot create " + path);
  const bool ok = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("log bench: cannot size " + path);
}

// Entries of the log that are missing or wrong, transaction by transaction.
std::uint64_t verify(durable::write_ahead_log& log, const bench_shape& s, std::string& what) {
  std::uint32_t torn = 0;
  const std::vector<durable::scanned_entry> entries = log.scan(&torn);
  std::vector<std::uint32_t> records(s.txns, 0), commits(s.txns, 0);
  std::uint64_t bad = torn;
  for (const auto& e : entries) {
    const std::uint64_t t = e.header.txn;
    if (t == 0 || t > s.txns) {
      ++bad;
      continue;
    }
    if (e.header.kind == static_cast<std::uint8_t>(durable::entry_kind::commit)) {
      ++commits[t - 1];
      continue;
    }
    bool ok = e.header.payload_bytes == s.payload_bytes && e.header.target < s.per_txn;
    for (std::uint32_t k = 0; ok && k < s.payload_bytes / 8; ++k) {
      std::uint64_t w;
      std::memcpy(&w, e.payload.data() + 8 * k, 8);
      ok = w == payload_word(t, static_cast<std::uint32_t>(e.header.target), k);
    }
    if (ok) ++records[t - 1];
    else ++bad;
  }
  for (std::uint64_t t = 0; t < s.txns; ++t)
    bad += (records[t] > s.per_txn ? records[t] - s.per_txn : s.per_txn - records[t]) +
           (commits[t] == 1 ? 0 : 1);
  what = std::to_string(entries.size()) + " entries read back, " + std::to_string(torn) + " torn";
  return bad;
}

struct run_figures {
  double secs = 0;
  std::uint64_t bad = 0;
  std::string what;
};

// Formats a log of `layout`, appends every transaction with `kernel_fn`, flushes, verifies.
template <class Kernel>
run_figures run_variant(const std::string& path, const options& opts, const durable::log_layout& layout,
                        const bench_shape& s, Kernel&& kernel_fn) {
  make_file(path, layout.file_bytes());
  auto ctl = make_controller(path, opts);
  durable::write_ahead_log::format(*ctl, layout);
  durable::write_ahead_log log(ctl, opts);
  log.recover(nullptr);
  unsigned* failed = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&failed, sizeof(unsigned)));
  WARPSTORE_CUDA_TRY(cudaMemset(failed, 0, sizeof(unsigned)));
  run_figures f;
  stopwatch clock;
  kernel_fn(log.ref(), failed);
  check_launch("log append kernel");
  log.flush();  // durable: FLUSH through the queues (memory controller: to the file)
  f.secs = clock.seconds();
  unsigned nfailed = 0;
  WARPSTORE_CUDA_TRY(cudaMemcpy(&nfailed, failed, sizeof nfailed, cudaMemcpyDeviceToHost));
  cudaFree(failed);
  log.check();
  if (nfailed != 0) throw std::runtime_error("log bench: " + std::to_string(nfailed) + " warps failed");
  f.bad = verify(log, s, f.what);
  return f;
}

}  // namespace

void declare_log(command_spec& cmd) {
  declare_controller_options(cmd);
  declare_options(cmd, {{"line_size", "4K", "log line size"}});
  cmd.option("entries", "N", "1M", "entries in all (a multiple of --txn-entries)")
      .option("txn-entries", "N", "32", "entries per transaction, one per lane (1 to 32)")
      .option("entry-bytes", "BYTES", "64", "bytes per entry, its 32-byte header included (64 to 288)")
      .option("warps", "N", "2048", "warps appending (each its own region)")
      .option("flush-every", "N", "0",
              "a warp FLUSHes after every N-th of its transactions (0: one host flush at the end)")
      .option("lock-per", "txn|entry", "txn",
              "global-lock baseline: the lock is held per transaction or per entry")
      .option("log", "PATH", "", "log file [default: /tmp/warpstore-log-bench.log]")
      .option("name", "NAME", "log.append.vs_global_lock", "result name");
}

void run_log(const parsed_args& args, report& out) {
  bench_shape s{};
  s.per_txn = static_cast<std::uint32_t>(args.integer("txn-entries"));
  const std::uint64_t entry_bytes = args.size("entry-bytes");
  if (s.per_txn < 1 || s.per_txn > 32) throw usage_error("--txn-entries must be 1 to 32");
  if (entry_bytes < 64 || entry_bytes > 288 || entry_bytes % 32 != 0)
    throw usage_error("--entry-bytes must be a multiple of 32 from 64 to 288");
  s.payload_bytes = static_cast<std::uint32_t>(entry_bytes - 32);
  const std::uint64_t entries = args.size("entries");
  if (entries == 0 || entries % s.per_txn != 0)
    throw usage_error("--entries must be a positive multiple of --txn-entries");
  s.txns = entries / s.per_txn;
  s.flush_every = static_cast<std::uint32_t>(args.integer("flush-every"));
  const std::uint64_t warps = std::min<std::uint64_t>(args.size("warps"), s.txns);
  const bool per_entry = args.str("lock-per") == "entry";
  if (!per_entry && args.str("lock-per") != "txn") throw usage_error("--lock-per is txn or entry");
  options opts = controller_options(args);
  opts.writable = true;
  opts.cache_bytes = 64ull << 20;  // unused by the log; keeps the controller's defaults small
  const std::string path = bench_log_path(args);
  const std::uint32_t L = opts.line_size;

  // Bytes one transaction takes (entries, commit record), and per region.
  const std::uint64_t txn_bytes = s.per_txn * entry_bytes + 32;
  const std::uint64_t per_warp = (s.txns + warps - 1) / warps;
  const auto round_up = [L](std::uint64_t b) { return (b + L - 1) / L * L; };

  durable::log_layout regions_layout{L, static_cast<std::uint32_t>(warps),
                                     round_up(per_warp * txn_bytes + L)};
  const unsigned blocks = static_cast<unsigned>((warps * 32 + log_block_threads - 1) / log_block_threads);
  if (blocks * std::uint64_t{log_block_threads} / 32 != warps)
    throw usage_error("--warps must be a multiple of " + std::to_string(log_block_threads / 32));
  const run_figures lf = run_variant(path, opts, regions_layout, s, [&](durable::log_ref ref, unsigned* failed) {
    regions_kernel<<<blocks, log_block_threads>>>(ref, s, failed);
  });

  // The baseline: one region holding everything, one lock.
  durable::log_layout shared_layout{L, 1, round_up(s.txns * txn_bytes + 2 * L)};
  ticket_lock* lock = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&lock, sizeof(ticket_lock)));
  WARPSTORE_CUDA_TRY(cudaMemset(lock, 0, sizeof(ticket_lock)));
  const run_figures gf = run_variant(path, opts, shared_layout, s, [&](durable::log_ref ref, unsigned* failed) {
    global_lock_kernel<<<blocks, log_block_threads>>>(ref, s, lock, per_entry, opts.timeout_ns, failed);
  });
  cudaFree(lock);
  ::unlink(path.c_str());

  result r;
  r.name = args.str("name");
  r.value = entries / lf.secs;
  r.unit = "entries/s";
  r.ceiling = entries / gf.secs;
  r.ceiling_name = std::string("the same transactions through one global device-scope ticket lock ") +
                   (per_entry ? "held per entry" : "held per transaction") +
                   " around appending to one shared tail and writing it; same file, same flush policy";
  r.verified = true;
  r.mismatches = lf.bad + gf.bad;
  r.params = json::object_builder()
                 .add("entries", static_cast<unsigned long long>(entries))
                 .add("entry_bytes", static_cast<unsigned long long>(entry_bytes))
                 .add("txn_entries", s.per_txn)
                 .add("transactions", static_cast<unsigned long long>(s.txns))
                 .add("warps", static_cast<unsigned long long>(warps))
                 .add("flush_every", s.flush_every)
                 .add("lock_per", per_entry ? "entry" : "txn")
                 .add("line_size", L)
                 .add("controller", to_string(opts.controller))
                 .add("service_threads", opts.service_threads)
                 .add("region_bytes", static_cast<unsigned long long>(regions_layout.region_bytes))
                 .add("regions_seconds", lf.secs)
                 .add("global_lock_seconds", gf.secs)
                 .add("regions_mismatches", static_cast<unsigned long long>(lf.bad))
                 .add("global_lock_mismatches", static_cast<unsigned long long>(gf.bad))
                 .done();
  out.results.push_back(r);
  std::ostringstream note;
  note << s.txns << " transactions of " << s.per_txn << " x " << entry_bytes
       << "-byte entries + a commit record, " << warps << " warps, timed to durable (log flush): "
       << "per-warp regions " << lf.secs << " s (" << lf.what << "), global lock " << gf.secs
       << " s (" << gf.what << ").";
  out.notes.push_back(note.str());
}

}  // namespace warpstore::bench
