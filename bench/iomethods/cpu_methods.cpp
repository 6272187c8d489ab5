#include "bench/iomethods/cpu_methods.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "support/pattern_file.h"
#include "support/timing.h"

namespace warpstore::bench::iomethods {

host_staging::host_staging(unsigned threads, std::size_t staging_bytes)
    : bytes_(staging_bytes), buffers_(2 * std::size_t{threads}) {
  for (auto& b : buffers_) b.resize(staging_bytes);
}

std::byte* host_staging::get(unsigned thread, unsigned buffer) {
  return buffers_.at(2 * std::size_t{thread} + buffer).data();
}

host_destination::host_destination(std::uint64_t bytes, unsigned threads, std::size_t staging_bytes)
    : host_staged(bytes, threads, staging_bytes) {
  std::memset(data_.data(), 0xFF, data_.size());
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
  explicit fd_holder(const std::string& path, int flags = O_RDONLY)
      : fd(::open(path.c_str(), flags | O_CLOEXEC)) {
    if (fd < 0)
      throw std::system_error(
          errno, std::generic_category(),
          "open " + path + ((flags & O_ACCMODE) == O_RDONLY ? "" : " for writing"));
  }
  ~fd_holder() { ::close(fd); }
  fd_holder(const fd_holder&) = delete;
  fd_holder& operator=(const fd_holder&) = delete;
};

std::uint64_t size_of(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw std::system_error(errno, std::generic_category(), "fstat " + path);
  return static_cast<std::uint64_t>(st.st_size);
}

void check_config(const cpu_method_config& cfg, std::uint64_t file_bytes);

// cfg.path mapped shared (read-only, or read-write for the write methods), checked against cfg.
struct file_mapping {
  std::byte* data = nullptr;
  std::uint64_t bytes = 0;
  file_mapping(const cpu_method_config& cfg, bool writable) {
    const fd_holder file(cfg.path, writable ? O_RDWR : O_RDONLY);
    bytes = size_of(file.fd, cfg.path);
    check_config(cfg, bytes);
    void* p = ::mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                     file.fd, 0);
    if (p == MAP_FAILED)
      throw std::system_error(errno, std::generic_category(), "mmap " + cfg.path);
    data = static_cast<std::byte*>(p);  // the mapping keeps the file open
  }
  ~file_mapping() { ::munmap(data, bytes); }
  file_mapping(const file_mapping&) = delete;
  file_mapping& operator=(const file_mapping&) = delete;
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
  return run_rounds(cfg,
                    round_hooks{{},
                                [&](std::uint64_t first, std::uint64_t count) {
                                  return dst.verify(cfg.tr, first, count, cfg.request_bytes,
                                                    cfg.file_seed);
                                }},
                    body);
}

method_result run_rounds(const cpu_method_config& cfg, const round_hooks& hooks,
                         const thread_body& body) {
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
    // A hook that fails must not leave the threads at the barrier: record it like theirs.
    auto guarded = [&](const auto& hook) {
      if (failure) return;
      try {
        hook();
      } catch (...) {
        failure = std::current_exception();
      }
    };
    if (hooks.prepare) guarded([&] { hooks.prepare(round_base, round_count); });
    const cpu_meter cpu;
    const stopwatch clock;
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    res.seconds += clock.seconds();
    res.cpu_seconds += cpu.seconds();
    guarded([&] { res.mismatches += hooks.verify(round_base, round_count); });
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
void pread_fully(int fd, std::byte* buf, std::size_t bytes, std::uint64_t offset,
                 std::uint64_t request) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, buf + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw std::system_error(
          errno, std::generic_category(),
          "pread of request " + std::to_string(request) + " at offset " + std::to_string(offset));
    if (n == 0)
      throw std::runtime_error("short pread of request " + std::to_string(request) + " at offset " +
                               std::to_string(offset) + ": " + std::to_string(done) + " of " +
                               std::to_string(bytes) + " bytes");
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

namespace {

// The body of the mmap methods: one copy per request between slot and file
// offset, its latency the copy's.
thread_body copy_per_request(
    const cpu_method_config& cfg,
    std::function<void(unsigned thread, std::uint64_t slot, std::uint64_t offset)> copy) {
  return [&cfg, copy = std::move(copy)](unsigned t, std::uint64_t base, std::uint64_t first,
                                        std::uint64_t last, std::vector<float>& lat) {
    for (std::uint64_t k = first; k < last; ++k) {
      const std::uint64_t start = monotonic_ns();
      copy(t, k, cfg.tr.index(base + k) * cfg.request_bytes);
      lat.push_back(micros_since(start));
    }
  };
}

}  // namespace

method_result run_pread_method(const cpu_method_config& cfg, destination& dst) {
  const fd_holder file(cfg.path);
  check_config(cfg, size_of(file.fd, cfg.path));
  const std::uint64_t B = cfg.request_bytes;
  const std::uint64_t batch = dst.staging_bytes() / B;
  if (batch == 0) throw std::invalid_argument("pread method: staging holds no whole request");

  return run_rounds(
      cfg, dst,
      [&](unsigned t, std::uint64_t base, std::uint64_t first, std::uint64_t last,
          std::vector<float>& lat) {
        // Start times of the requests of the batch in each staging buffer.
        std::vector<std::uint64_t> started[2] = {std::vector<std::uint64_t>(batch),
                                                 std::vector<std::uint64_t>(batch)};
        std::uint64_t in_flight[2] = {0, 0};  // requests whose copy is under way, per buffer
        auto finish = [&](unsigned b) {       // the copy from buffer b is done
          if (in_flight[b] == 0) return;
          dst.wait(t, b);
          for (std::uint64_t k = 0; k < in_flight[b]; ++k)
            lat.push_back(micros_since(started[b][k]));
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
  const file_mapping map(cfg, false);
  const std::byte* bytes = map.data;
  const std::uint64_t B = cfg.request_bytes;

  return run_rounds(
      cfg, dst, copy_per_request(cfg, [&](unsigned t, std::uint64_t slot, std::uint64_t offset) {
        dst.copy(t, 0, slot * B, bytes + offset, B);
        dst.wait(t, 0);
      }));
}

// ---- writes ----------------------------------------------------------------------

void host_source::fetch(unsigned, unsigned, std::uint64_t offset, std::byte* dst,
                        std::size_t bytes) {
  if (offset > data_.size() || bytes > data_.size() - offset)
    throw std::out_of_range("host_source: fetch past the end");
  std::memcpy(dst, data_.data() + offset, bytes);
}

void host_source::fill(const trace& tr, std::uint64_t first, std::uint64_t count,
                       std::uint32_t request_bytes, std::uint64_t seed) {
  if (count * request_bytes > data_.size())
    throw std::out_of_range("host_source: fill past the end");
  for (std::uint64_t k = 0; k < count; ++k)
    tools::fill_buffer(data_.data() + k * request_bytes, tr.index(first + k) * request_bytes,
                       request_bytes, seed);
}

void make_write_target(const std::string& path, std::uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::system_error(errno, std::generic_category(), "create write target " + path);
  const int rc = ::ftruncate(fd, static_cast<off_t>(bytes));
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw std::system_error(err, std::generic_category(), "size write target " + path);
}

void discard_write_target(const std::string& path) {
  // Truncating first lets dirty pages go without being written back. Best
  // effort: a target that is already gone is fine.
  if (::truncate(path.c_str(), 0) != 0 && errno != ENOENT)
    std::fprintf(stderr, "iomethods: could not truncate %s: %s\n", path.c_str(), std::strerror(errno));
  ::unlink(path.c_str());
}

std::uint64_t verify_written(const std::string& path, const trace& tr, std::uint64_t first,
                             std::uint64_t count, std::uint32_t request_bytes, std::uint64_t seed,
                             unsigned threads) {
  const fd_holder file(path);
  threads = std::max(1u, threads);
  std::vector<std::uint64_t> bad(threads, 0);
  std::exception_ptr failure;
  std::mutex failure_lock;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        std::vector<std::byte> buf(request_bytes);
        for (std::uint64_t k = count * t / threads; k < count * (t + 1) / threads; ++k) {
          const std::uint64_t off = tr.index(first + k) * request_bytes;
          pread_fully(file.fd, buf.data(), request_bytes, off, first + k);
          bad[t] += tools::count_mismatches(buf.data(), off, request_bytes, seed);
        }
      } catch (...) {
        const std::lock_guard<std::mutex> g(failure_lock);
        if (!failure) failure = std::current_exception();
      }
    });
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
  return std::accumulate(bad.begin(), bad.end(), std::uint64_t{0});
}

namespace {

void pwrite_fully(int fd, const std::byte* buf, std::size_t bytes, std::uint64_t offset,
                  std::uint64_t request) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd, buf + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::system_error(
          n < 0 ? errno : EIO, std::generic_category(),
          "pwrite of request " + std::to_string(request) + " at offset " + std::to_string(offset));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

round_hooks write_hooks(const cpu_method_config& cfg, source& src) {
  return {[&cfg, &src](std::uint64_t first, std::uint64_t count) {
            src.fill(cfg.tr, first, count, cfg.request_bytes, cfg.file_seed);
          },
          [&cfg](std::uint64_t first, std::uint64_t count) {
            return verify_written(cfg.path, cfg.tr, first, count, cfg.request_bytes, cfg.file_seed,
                                  cfg.threads);
          }};
}

method_result run_pwrite_method(const cpu_method_config& cfg, source& src) {
  const fd_holder file(cfg.path, O_WRONLY);
  check_config(cfg, size_of(file.fd, cfg.path));
  const int fd = file.fd;
  const std::uint64_t B = cfg.request_bytes;
  const std::uint64_t batch = src.staging_bytes() / B;
  if (batch == 0) throw std::invalid_argument("pwrite method: staging holds no whole request");

  return run_rounds(cfg, write_hooks(cfg, src),
                    [&](unsigned t, std::uint64_t base, std::uint64_t first, std::uint64_t last,
                        std::vector<float>& lat) {
                      // Latency of a request: from the start of its batch's fetch to the end of its
                      // pwrite.
                      std::uint64_t fetched_at[2] = {0, 0};
                      auto start_fetch = [&](unsigned b, std::uint64_t k0) {
                        fetched_at[b] = monotonic_ns();
                        src.fetch(t, b, k0 * B, src.staging(t, b), std::min(batch, last - k0) * B);
                      };
                      unsigned b = 0;
                      if (first < last) start_fetch(0, first);
                      for (std::uint64_t k0 = first; k0 < last; k0 += batch, b ^= 1u) {
                        src.wait(t, b);
                        if (k0 + batch < last)
                          start_fetch(b ^ 1u, k0 + batch);  // overlaps these pwrites
                        const std::byte* stage = src.staging(t, b);
                        for (std::uint64_t k = k0; k < std::min(k0 + batch, last); ++k) {
                          const std::uint64_t i = base + k;
                          pwrite_fully(fd, stage + (k - k0) * B, B, cfg.tr.index(i) * B, i);
                          lat.push_back(micros_since(fetched_at[b]));
                        }
                      }
                    });
}

method_result run_mmap_write_method(const cpu_method_config& cfg, source& src) {
  const file_mapping map(cfg, true);
  std::byte* bytes = map.data;
  const std::uint64_t B = cfg.request_bytes;
  return run_rounds(
      cfg, write_hooks(cfg, src),
      copy_per_request(cfg, [&](unsigned t, std::uint64_t slot, std::uint64_t offset) {
        src.fetch(t, 0, slot * B, bytes + offset, B);
        src.wait(t, 0);
      }));
}

method_result run_uring_write_method(const cpu_method_config& cfg, unsigned queue_depth,
                                     std::byte* arena) {
  if (queue_depth == 0 || queue_depth > 32768)
    throw std::invalid_argument("uring write: queue depth must be 1 to 32768");
  const fd_holder file(cfg.path, O_WRONLY);
  check_config(cfg, size_of(file.fd, cfg.path));
  const int fd = file.fd;
  const std::uint64_t B = cfg.request_bytes;
  // One ring per thread, set up before the clock starts.
  std::vector<io_uring> rings(cfg.threads);
  unsigned ready = 0;
  struct ring_guard {
    std::vector<io_uring>& rings;
    unsigned& ready;
    ~ring_guard() {
      for (unsigned i = 0; i < ready; ++i) io_uring_queue_exit(&rings[i]);
    }
  } exit_rings{rings, ready};
  for (; ready < cfg.threads; ++ready)
    if (const int e = io_uring_queue_init(queue_depth, &rings[ready], 0); e < 0)
      throw std::system_error(-e, std::generic_category(), "io_uring_queue_init for writes");
  std::vector<std::uint64_t> submitted(cfg.slots);
  const round_hooks hooks{[&](std::uint64_t first, std::uint64_t count) {
                            for (std::uint64_t k = 0; k < count; ++k)
                              tools::fill_buffer(arena + k * B, cfg.tr.index(first + k) * B, B,
                                                 cfg.file_seed);
                          },
                          [&cfg](std::uint64_t first, std::uint64_t count) {
                            return verify_written(cfg.path, cfg.tr, first, count, cfg.request_bytes,
                                                  cfg.file_seed, cfg.threads);
                          }};

  return run_rounds(
      cfg, hooks,
      [&](unsigned t, std::uint64_t base, std::uint64_t first, std::uint64_t last,
          std::vector<float>& lat) {
        io_uring* ring = &rings[t];
        std::uint64_t next = first, inflight = 0, done = 0;
        while (done < last - first) {
          while (inflight < queue_depth && next < last) {
            io_uring_sqe* sqe = io_uring_get_sqe(ring);
            if (!sqe) break;
            io_uring_prep_write(sqe, fd, arena + next * B, static_cast<unsigned>(B),
                                cfg.tr.index(base + next) * B);
            io_uring_sqe_set_data64(sqe, next);
            submitted[next] = monotonic_ns();
            ++next;
            ++inflight;
          }
          const int ret = io_uring_submit_and_wait(ring, 1);
          if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
            throw std::system_error(-ret, std::generic_category(),
                                    "io_uring_submit_and_wait (writes)");
          const std::uint64_t now = monotonic_ns();
          unsigned head = 0, seen = 0;
          io_uring_cqe* cqe = nullptr;
          std::string error;
          io_uring_for_each_cqe(ring, head, cqe) {
            ++seen;
            const std::uint64_t k = io_uring_cqe_get_data64(cqe);
            lat.push_back(static_cast<float>(static_cast<double>(now - submitted[k]) * 1e-3));
            if (cqe->res != static_cast<int>(B) && error.empty())
              error = "io_uring write of request " + std::to_string(base + k) + ": " +
                      (cqe->res < 0 ? std::strerror(-cqe->res)
                                    : std::to_string(cqe->res) + " bytes written");
          }
          io_uring_cq_advance(ring, seen);
          inflight -= seen;
          done += seen;
          if (!error.empty()) {
            // Reap what is still in flight (bounded) before the arena is refilled.
            __kernel_timespec ts{1, 0};
            for (; inflight > 0; --inflight) {
              io_uring_cqe* c = nullptr;
              if (io_uring_wait_cqe_timeout(ring, &c, &ts) < 0) break;
              io_uring_cqe_seen(ring, c);
            }
            throw std::runtime_error(error);
          }
        }
      });
}

}  // namespace warpstore::bench::iomethods
