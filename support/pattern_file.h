// Host-side helpers for files whose every 8-byte word is
// tools::pattern_word(offset, seed), little-endian: fill a buffer, count the
// words of a buffer that differ, and write or check a whole file in parallel.
// Shared by warpstore-gen, the tests and the benchmarks.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "support/pattern.cuh"

namespace warpstore::tools {

static_assert(std::endian::native == std::endian::little,
              "pattern files are little-endian; a big-endian host needs byte swaps here");

// Writes the pattern bytes of file range [file_offset, file_offset + bytes) to `ptr`.
// Any offset and length; the aligned middle goes a word at a time.
inline void fill_buffer(void* ptr, std::uint64_t file_offset, std::size_t bytes,
                        std::uint64_t seed = 0) {
  auto* out = static_cast<unsigned char*>(ptr);
  std::size_t i = 0;
  for (; i < bytes && ((file_offset + i) & 7) != 0; ++i) out[i] = pattern_byte(file_offset + i, seed);
  for (; i + 8 <= bytes; i += 8) {
    const std::uint64_t w = pattern_word(file_offset + i, seed);
    std::memcpy(out + i, &w, 8);
  }
  for (; i < bytes; ++i) out[i] = pattern_byte(file_offset + i, seed);
}

// Number of 8-byte file words (partial words at either edge count as one)
// in `ptr` that differ from the pattern of [file_offset, file_offset + bytes).
inline std::uint64_t count_mismatches(const void* ptr, std::uint64_t file_offset,
                                      std::size_t bytes, std::uint64_t seed = 0) {
  const auto* in = static_cast<const unsigned char*>(ptr);
  std::uint64_t bad = 0;
  std::size_t i = 0;
  // Leading partial word.
  bool head_bad = false;
  bool in_head = false;
  for (; i < bytes && ((file_offset + i) & 7) != 0; ++i) {
    in_head = true;
    head_bad |= in[i] != pattern_byte(file_offset + i, seed);
  }
  if (in_head && head_bad) ++bad;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, in + i, 8);
    bad += w != pattern_word(file_offset + i, seed);
  }
  bool tail_bad = false;
  for (; i < bytes; ++i) tail_bad |= in[i] != pattern_byte(file_offset + i, seed);
  return bad + (tail_bad ? 1 : 0);
}

// File offset of the first byte in `ptr` that differs from the pattern, or
// UINT64_MAX when all match.
inline std::uint64_t first_mismatch(const void* ptr, std::uint64_t file_offset, std::size_t bytes,
                                    std::uint64_t seed = 0) {
  const auto* in = static_cast<const unsigned char*>(ptr);
  for (std::size_t i = 0; i < bytes; ++i)
    if (in[i] != pattern_byte(file_offset + i, seed)) return file_offset + i;
  return UINT64_MAX;
}

// Progress of a whole-file pass: bytes done so far and the total.
using progress_fn = std::function<void(std::uint64_t done, std::uint64_t total)>;

namespace detail {

[[noreturn]] inline void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// Runs body(offset, length) over `total` bytes in `chunk`-sized pieces on
// `threads` threads, calling `progress` from the calling thread about ten
// times a second. The first exception of any worker is rethrown.
inline void parallel_chunks(std::uint64_t total, std::uint64_t chunk, unsigned threads,
                            const progress_fn& progress,
                            const std::function<void(std::uint64_t, std::uint64_t)>& body) {
  threads = std::max(1u, threads);
  std::atomic<std::uint64_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      try {
        for (;;) {
          if (failed.load(std::memory_order_relaxed)) return;
          const std::uint64_t off = next.fetch_add(chunk, std::memory_order_relaxed);
          if (off >= total) return;
          const std::uint64_t len = std::min(chunk, total - off);
          body(off, len);
          done.fetch_add(len, std::memory_order_relaxed);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed.store(true);
      }
    });
  }
  if (progress) {
    while (done.load() < total && !failed.load()) {
      progress(done.load(), total);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  if (progress) progress(total, total);
}

inline void pwrite_all(int fd, const unsigned char* p, std::uint64_t len, std::uint64_t off,
                       const std::string& path) {
  while (len > 0) {
    const ssize_t n = ::pwrite(fd, p, len, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("pwrite " + path);
    }
    p += n;
    off += static_cast<std::uint64_t>(n);
    len -= static_cast<std::uint64_t>(n);
  }
}

inline std::uint64_t pread_all(int fd, unsigned char* p, std::uint64_t len, std::uint64_t off,
                               const std::string& path) {
  std::uint64_t got = 0;
  while (got < len) {
    const ssize_t n = ::pread(fd, p + got, len - got, static_cast<off_t>(off + got));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("pread " + path);
    }
    if (n == 0) break;  // end of file
    got += static_cast<std::uint64_t>(n);
  }
  return got;
}

class fd_guard {
 public:
  explicit fd_guard(int fd) : fd_(fd) {}
  ~fd_guard() {
    if (fd_ >= 0) ::close(fd_);
  }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

inline constexpr std::uint64_t chunk_bytes = std::uint64_t{8} << 20;

}  // namespace detail

// Creates (or truncates) `path` and writes `size` pattern bytes with
// `threads` parallel pwrite streams; fdatasync at the end unless `sync` is false.
inline void write_pattern_file(const std::string& path, std::uint64_t size, std::uint64_t seed,
                               unsigned threads, const progress_fn& progress = {},
                               bool sync = true) {
  detail::fd_guard fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) detail::throw_errno("open " + path);
  if (size > 0) {
    // Reserve the space up front so a full disk fails now, not at 90 %.
    const int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(size));
    if (err != 0 && err != EOPNOTSUPP && err != EINVAL) {
      errno = err;
      detail::throw_errno("posix_fallocate " + path);
    }
  }
  detail::parallel_chunks(size, detail::chunk_bytes, threads, progress,
                          [&](std::uint64_t off, std::uint64_t len) {
                            thread_local std::vector<unsigned char> buf;
                            buf.resize(detail::chunk_bytes);
                            fill_buffer(buf.data(), off, len, seed);
                            detail::pwrite_all(fd.get(), buf.data(), len, off, path);
                          });
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) detail::throw_errno("ftruncate " + path);
  if (sync && ::fdatasync(fd.get()) != 0) detail::throw_errno("fdatasync " + path);
}

struct check_result {
  std::uint64_t bytes = 0;       // file size
  std::uint64_t mismatches = 0;  // words that differ from the pattern
  std::uint64_t first_bad_offset = UINT64_MAX;  // first byte that differs, UINT64_MAX if none
};

// Reads all of `path` in parallel and counts the words that are not the pattern.
inline check_result check_pattern_file(const std::string& path, std::uint64_t seed,
                                       unsigned threads, const progress_fn& progress = {}) {
  detail::fd_guard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) detail::throw_errno("open " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) detail::throw_errno("fstat " + path);
  check_result r;
  r.bytes = static_cast<std::uint64_t>(st.st_size);
  std::atomic<std::uint64_t> mismatches{0}, first_bad{UINT64_MAX};
  detail::parallel_chunks(r.bytes, detail::chunk_bytes, threads, progress,
                          [&](std::uint64_t off, std::uint64_t len) {
                            thread_local std::vector<unsigned char> buf;
                            buf.resize(detail::chunk_bytes);
                            const std::uint64_t got =
                                detail::pread_all(fd.get(), buf.data(), len, off, path);
                            if (got != len)
                              throw std::runtime_error(path + ": file shrank while being checked");
                            const std::uint64_t bad = count_mismatches(buf.data(), off, len, seed);
                            if (bad != 0) {
                              mismatches.fetch_add(bad);
                              const std::uint64_t at = first_mismatch(buf.data(), off, len, seed);
                              std::uint64_t prev = first_bad.load();
                              while (at < prev && !first_bad.compare_exchange_weak(prev, at)) {
                              }
                            }
                          });
  r.mismatches = mismatches.load();
  r.first_bad_offset = first_bad.load();
  return r;
}

}  // namespace warpstore::tools
