#include "controller/memory_controller.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace warpstore {

memory_controller::memory_controller(std::shared_ptr<backing_file> file, unsigned loader_threads,
                                     std::uint64_t write_behind_bytes, bool map,
                                     std::uint32_t fill_together)
    : controller(std::move(file)),
      capacity_blocks_(file_->capacity_blocks()),
      write_behind_bytes_(write_behind_bytes),
      fill_together_(fill_together) {
  if (!(map && !file_->writable() && map_page_cache())) load(loader_threads);
  if (file_->writable()) {
    chunks_ = ((std::max<std::uint64_t>(capacity_blocks_, 1) << nvme::block_shift) +
               (std::uint64_t{1} << chunk_shift) - 1) >> chunk_shift;
    dirty_ = runtime::make_host_mapped<std::uint32_t>(chunks_);
  }
}

memory_controller::~memory_controller() {
  if (map_ == nullptr) return;
  runtime::unregister_host(map_);
  ::munmap(map_, map_bytes_);
}

// The file's pages, mapped read-only (the tail of the last page reads as
// zeros, which covers the padding of the last block) and pinned, so kernels
// read the page cache itself.
bool memory_controller::map_page_cache() {
  const std::uint64_t size = file_->size_bytes();
  const long page = ::sysconf(_SC_PAGESIZE);
  if (size == 0 || page <= 0) return false;
  const std::uint64_t bytes = (size + static_cast<std::uint64_t>(page) - 1) &
                              ~(static_cast<std::uint64_t>(page) - 1);
  if (std::max<std::uint64_t>(capacity_blocks_, 1) * nvme::block_size > bytes) return false;
  void* m = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ, MAP_SHARED | MAP_POPULATE,
                   file_->buffered_fd(), 0);
  if (m == MAP_FAILED) return false;
  if (!runtime::register_host(m, static_cast<std::size_t>(bytes), true)) {
    ::munmap(m, static_cast<std::size_t>(bytes));
    return false;
  }
  map_ = m;
  map_bytes_ = static_cast<std::size_t>(bytes);
  bytes_ = static_cast<std::byte*>(m);
  return true;
}

// Reads the whole file into pinned memory with `loader_threads` threads.
void memory_controller::load(unsigned loader_threads) {
  const std::uint64_t size = file_->size_bytes();
  // Zero-padded to whole blocks: a partial last block reads as zeros past EOF.
  // The loaders fill [0, size); only the padding is zeroed here (zeroing a
  // multi-GB copy first would cost as much as a tenth of the load).
  const std::uint64_t padded = std::max<std::uint64_t>(capacity_blocks_, 1) * nvme::block_size;
  data_ = runtime::make_host_mapped<std::byte>(padded, false);
  bytes_ = data_.get();
  std::memset(data_.get() + size, 0, padded - size);
  const unsigned n = std::max(1u, loader_threads);
  const std::uint64_t chunk = ((size / n) + (1u << 20)) & ~std::uint64_t{(1u << 20) - 1};
  std::vector<std::thread> threads;
  std::vector<std::string> failures(n);
  std::vector<error_info> failed(n);
  // Plain buffered reads: an O_DIRECT descriptor needs aligned lengths at EOF.
  const int fd = ::open(file_->path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw file_error(errno, "open " + file_->path(), file_->path());
  for (unsigned t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      std::uint64_t off = std::min<std::uint64_t>(size, t * chunk);
      const std::uint64_t end = std::min<std::uint64_t>(size, off + chunk);
      while (off < end) {
        const ssize_t r = ::pread(fd, data_.get() + off,
                                  std::min<std::uint64_t>(end - off, 1u << 26),
                                  static_cast<off_t>(off));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          const int err = r == 0 ? 0 : errno;
          failed[t] = file_info(file_->path(), err, off);
          failures[t] = "reading " + file_->path() + " at byte " + std::to_string(off) + ": " +
                        (r == 0 ? std::string("unexpected end of file") : std::strerror(err));
          return;
        }
        off += static_cast<std::uint64_t>(r);
      }
    });
  }
  for (auto& th : threads) th.join();
  ::close(fd);
  for (unsigned t = 0; t < n; ++t)
    if (!failures[t].empty()) throw runtime_error("memory controller: " + failures[t], failed[t]);
}

void memory_controller::check() const {
  struct stat st {};
  if (::fstat(file_->buffered_fd(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  const auto now = static_cast<std::uint64_t>(st.st_size);
  const std::uint64_t size = file_->size_bytes();
  if (now >= size) return;
  throw file_error(ESTALE,
                   file_->path() + ": the file shrank to " + std::to_string(now) + " bytes under the memory "
                   "controller, which serves the " + std::to_string(size) + " bytes it had at "
                   "open; reopen the array (the host controller reports reads past the end)",
                   file_->path(), now);
}

// Writes each run of dirty chunks with as few pwrite calls as it takes, and
// every write_behind_bytes_ asks the kernel to start writing what was just
// written to storage (sync_file_range, no waiting), so the disk works while
// the rest is copied and the final fdatasync finds less left.
void memory_controller::make_durable() {
  if (!dirty_) return;
  const std::uint64_t size = file_->size_bytes();
  const int fd = file_->buffered_fd();
  auto dirty = [&](std::uint64_t c) {
    return detail::system_atomic<std::uint32_t>(dirty_.get()[c]);
  };
  std::uint64_t unstarted_from = 0, unstarted = 0;
  for (std::uint64_t c = 0; c < chunks_;) {
    if (dirty(c).exchange(0, detail::memory_order_acquire) == 0) {
      ++c;
      continue;
    }
    std::uint64_t e = c + 1;  // one past the run's last chunk
    while (e < chunks_ && dirty(e).exchange(0, detail::memory_order_acquire) != 0) ++e;
    // Bytes past the end of the file (zero padding of the last block) stay out.
    std::uint64_t off = c << chunk_shift;
    const std::uint64_t end = std::min<std::uint64_t>(size, e << chunk_shift);
    if (unstarted == 0) unstarted_from = off;
    while (off < end) {
      const ssize_t w = ::pwrite(fd, bytes_ + off, end - off, static_cast<off_t>(off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = w < 0 ? errno : 0;
        for (std::uint64_t k = off >> chunk_shift; k < e; ++k)  // not written: still dirty
          dirty(k).store(1, detail::memory_order_relaxed);
        throw runtime_error("memory controller: writing back " + file_->path() + " at byte " +
                                std::to_string(off) + ": " +
                                (w == 0 ? std::string("nothing written") : std::strerror(err)),
                            file_info(file_->path(), err, off));
      }
      off += static_cast<std::uint64_t>(w);
    }
    unstarted += (e - c) << chunk_shift;
    if (write_behind_bytes_ != 0 && unstarted >= write_behind_bytes_) {
      // A failure shows again in the fdatasync, which reports writeback errors.
      (void)::sync_file_range(fd, static_cast<off_t>(unstarted_from),
                              static_cast<off_t>(end - unstarted_from), SYNC_FILE_RANGE_WRITE);
      unstarted = 0;
    }
    c = e;
  }
  if (::fdatasync(fd) != 0) {
    const int err = errno;
    throw runtime_error(
        "memory controller: fdatasync of " + file_->path() + ": " + std::strerror(err),
        file_info(file_->path(), err));
  }
}

io_ref memory_controller::device_ref() const {
  io_ref r{};
  r.kind = io_kind::memory;
  r.memory = memory_source_ref{bytes_, capacity_blocks_, dirty_.get(), chunk_shift, fill_together_};
  return r;
}

}  // namespace warpstore
