#include "bench/iomethods/cpu_methods.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "bench/common/timing.h"
#include "tools/pattern_file.h"

namespace warpstore::bench::iomethods {

host_destination::host_destination(std::uint64_t bytes, unsigned threads, std::size_t staging_bytes)
    : data_(bytes), staging_bytes_(staging_bytes), staging_(2 * std::size_t{threads}) {
  for (auto& s : staging_) s.resize(staging_bytes);
  std::memset(data_.data(), 0xFF, data_.size());
}

std::byte* host_destination::staging(unsigned thread, unsigned buffer) {
  return staging_.at(2 * std::size_t{thread} + buffer).data();
}

void host_destination::copy(unsigned, unsigned, std::uint64_t offset, const std::byte* src,
                            std::size_t bytes) {
  if (offset > data_.size() || bytes > data_.size() - offset)
    throw std::out_of_range("host_destination: copy past the end");
  std::memcpy(data_.data() + offset, src, bytes);
}

std::uint64_t host_destination::verify(const trace& tr, std::uint64_t first, std::uint64_t count,
                                       std::uint32_t request_bytes, std::uint64_t seed) {
  std::uint64_t bad = 0;
  for (std::uint64_t k = 0; k < count; ++k)
    bad += tools::count_mismatches(data_.data() + k * request_bytes,
                                   tr.index(first + k) * request_bytes, request_bytes, seed);
  std::memset(data_.data(), 0xFF, data_.size());  // no slot passes next round with these bytes
  return bad;
}

namespace {

struct fd_holder {
  int fd = -1;
  explicit fd_holder(const std::string& path) : fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
  }
  ~fd_holder() { ::close(fd); }
  fd_holder(const fd_holder&) = delete;
  fd_holder& operator=(const fd_holder&) = delete;
};

void check_config(const cpu_method_config& cfg, std::uint64_t file_bytes) {
  if (cfg.threads == 0) throw std::invalid_argument("I/O method: threads must be at least 1");
  if (cfg.request_bytes == 0 || cfg.request_bytes % 8 != 0)
    throw std::invalid_argument("I/O method: request size must be a positive multiple of 8");
  if (cfg.slots == 0) throw std::invalid_argument("I/O method: slots must be at least 1");
  if (cfg.tr.blocks == 0 || cfg.tr.blocks > file_bytes / cfg.request_bytes)
    throw std::invalid_argument("I/O method: the trace spans " + std::to_string(cfg.tr.blocks) +
                                " blocks but " + cfg.path + " holds " +
                                std::to_string(file_bytes / cfg.request_bytes));
}

}  // namespace

method_result run_rounds(const cpu_method_config& cfg, destination& dst, const thread_body& body) {
  method_result res;
  res.requests = cfg.requests;
  res.bytes = cfg.requests * cfg.request_bytes;
  if (cfg.requests == 0) return res;
  const unsigned rounds = static_cast<unsigned>((cfg.requests + cfg.slots - 1) / cfg.slots);
  res.rounds = rounds;
  std::vector<std::vector<float>> latencies(cfg.threads);
  for (auto& l : latencies) l.reserve(cfg.requests / cfg.threads + 1);
  std::exception_ptr failure;
  std::mutex failure_lock;
  std::uint64_t round_base = 0, round_count = 0;
  std::barrier sync(static_cast<std::ptrdiff_t>(cfg.threads) + 1);

  std::vector<std::thread> pool;
  pool.reserve(cfg.threads);
  for (unsigned t = 0; t < cfg.threads; ++t)
    pool.emplace_back([&, t] {
      for (unsigned r = 0; r < rounds; ++r) {
        sync.arrive_and_wait();  // round set up
        try {
          body(t, round_base, round_count * t / cfg.threads, round_count * (t + 1) / cfg.threads,
               latencies[t]);
        } catch (...) {  // keep arriving at the barrier; the first failure is raised after
          const std::lock_guard<std::mutex> g(failure_lock);
          if (!failure) failure = std::current_exception();
        }
        sync.arrive_and_wait();  // round done: clock stops
      }
    });
  for (unsigned r = 0; r < rounds; ++r) {
    round_base = static_cast<std::uint64_t>(r) * cfg.slots;
    round_count = std::min(cfg.slots, cfg.requests - round_base);
    const cpu_meter cpu;
    const stopwatch clock;
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    res.seconds += clock.seconds();
    res.cpu_seconds += cpu.seconds();
    if (!failure)
      res.mismatches += dst.verify(cfg.tr, round_base, round_count, cfg.request_bytes, cfg.file_seed);
  }
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);

  std::vector<float> all;
  all.reserve(cfg.requests);
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  res.latency = summarize(all);
  res.iops = per_s(static_cast<double>(res.requests), res.seconds);
  res.gbps = gb_per_s(static_cast<double>(res.bytes), res.seconds);
  return res;
}

namespace {

float micros_since(std::uint64_t start_ns) {
  return static_cast<float>(static_cast<double>(monotonic_ns() - start_ns) * 1e-3);
}

// pread of a whole request at `offset` into `buf`; raises on error or short read.
void pread_fully(int fd, std::byte* buf, std::size_t bytes, std::uint64_t offset, std::uint64_t request) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, buf + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw std::system_error(errno, std::generic_category(),
                              "pread of request " + std::to_string(request) + " at offset " +
                                  std::to_string(offset));
    if (n == 0)
      throw std::runtime_error("short pread of request " + std::to_string(request) + " at offset " +
                               std::to_string(offset) + ": " + std::to_string(done) + " of " +
                               std::to_string(bytes) + " bytes");
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

method_result run_pread_method(const cpu_method_config& cfg, destination& dst) {
  const fd_holder file(cfg.path);
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw std::system_error(errno, std::generic_category(), "fstat " + cfg.path);
  check_config(cfg, static_cast<std::uint64_t>(st.st_size));
  const std::uint64_t B = cfg.request_bytes;
  const std::uint64_t batch = dst.staging_bytes() / B;
  if (batch == 0) throw std::invalid_argument("pread method: staging holds no whole request");

  return run_rounds(cfg, dst, [&](unsigned t, std::uint64_t base, std::uint64_t first, std::uint64_t last,
                                  std::vector<float>& lat) {
    // Start times of the requests of the batch in each staging buffer.
    std::vector<std::uint64_t> started[2] = {std::vector<std::uint64_t>(batch),
                                             std::vector<std::uint64_t>(batch)};
    std::uint64_t in_flight[2] = {0, 0};  // requests whose copy is under way, per buffer
    auto finish = [&](unsigned b) {  // the copy from buffer b is done
      if (in_flight[b] == 0) return;
      dst.wait(t, b);
      for (std::uint64_t k = 0; k < in_flight[b]; ++k) lat.push_back(micros_since(started[b][k]));
      in_flight[b] = 0;
    };
    unsigned b = 0;
    for (std::uint64_t k0 = first; k0 < last; k0 += batch, b ^= 1u) {
      const std::uint64_t n = std::min(batch, last - k0);
      std::byte* stage = dst.staging(t, b);
      for (std::uint64_t k = 0; k < n; ++k) {
        started[b][k] = monotonic_ns();
        const std::uint64_t i = base + k0 + k;
        pread_fully(file.fd, stage + k * B, B, cfg.tr.index(i) * B, i);
      }
      finish(b ^ 1u);  // the other buffer's copy overlapped these preads
      dst.copy(t, b, k0 * B, stage, n * B);
      in_flight[b] = n;
    }
    finish(0);
    finish(1);
  });
}

method_result run_mmap_method(const cpu_method_config& cfg, destination& dst) {
  const fd_holder file(cfg.path);
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw std::system_error(errno, std::generic_category(), "fstat " + cfg.path);
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  check_config(cfg, file_bytes);
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, file.fd, 0);
  if (map == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap " + cfg.path);
  struct unmapper {
    void* p;
    std::size_t n;
    ~unmapper() { ::munmap(p, n); }
  } unmap_on_exit{map, file_bytes};
  const auto* bytes = static_cast<const std::byte*>(map);
  const std::uint64_t B = cfg.request_bytes;

  return run_rounds(cfg, dst, [&](unsigned t, std::uint64_t base, std::uint64_t first, std::uint64_t last,
                                  std::vector<float>& lat) {
    for (std::uint64_t k = first; k < last; ++k) {
      const std::uint64_t start = monotonic_ns();
      dst.copy(t, 0, k * B, bytes + cfg.tr.index(base + k) * B, B);
      dst.wait(t, 0);
      lat.push_back(micros_since(start));
    }
  });
}

}  // namespace warpstore::bench::iomethods
