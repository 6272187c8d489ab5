// A file or block device opened read-only or read-write for a controller: O_DIRECT when
// asked for (or when it works, in automatic mode), its size and the alignment
// direct I/O needs.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "controller/residency.h"
#include "warpstore/controller.h"
#include "warpstore/error.h"
#include "warpstore/nvme.h"

namespace warpstore {

namespace {

// STATX_DIOALIGN (Linux 6.1) may be missing from older headers; the kernel
// ABI is fixed, so the value and the field offsets can be spelled out here.
constexpr unsigned statx_dioalign = 0x00002000u;
constexpr std::size_t statx_dio_mem_align_offset = 0x98;
constexpr std::size_t statx_dio_offset_align_offset = 0x9c;
// Largest alignment we accept from the kernel or a probe; anything bigger is
// surely not what it seems.
constexpr std::uint32_t max_direct_alignment = 1u << 16;

[[noreturn]] void throw_errno(int err, const std::string& what, const std::string& path) {
  throw file_error(err, "warpstore: " + what + " '" + path + "'", path);
}

int open_file(const std::string& path, bool direct, file_access access) {
  int flags = (access == file_access::read_write ? O_RDWR : O_RDONLY) | O_CLOEXEC;
  if (direct) flags |= O_DIRECT;
  int fd;
  do {
    fd = ::open(path.c_str(), flags);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

struct free_deleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

// Reads `bytes` at `offset` into a buffer aligned to exactly `mem_align`
// (not more), returning 0 or the errno. Used to learn what O_DIRECT accepts
// when the kernel does not say.
int probe_direct_read(int fd, std::uint64_t offset, std::uint32_t bytes, std::uint32_t mem_align) {
  constexpr std::size_t big = 1u << 16;
  std::unique_ptr<std::byte, free_deleter> buf(
      static_cast<std::byte*>(std::aligned_alloc(big, 2 * big)));
  if (!buf) return ENOMEM;
  // Offset by mem_align inside a 64 KiB-aligned block: aligned to mem_align
  // but to nothing larger.
  std::byte* p = buf.get() + (mem_align < big ? mem_align : 0);
  ssize_t r;
  do {
    r = ::pread(fd, p, bytes, static_cast<off_t>(offset));
  } while (r < 0 && errno == EINTR);
  return r < 0 ? errno : 0;
}

// Alignment O_DIRECT needs on a regular file: what statx reports, else the
// smallest of 512 / 4096 a probe read accepts, else 4096 (the safe choice).
std::uint32_t file_direct_alignment(int fd, std::uint64_t size) {
  alignas(8) unsigned char raw[256] = {};
  if (::syscall(SYS_statx, fd, "", AT_EMPTY_PATH, statx_dioalign, raw) == 0) {
    std::uint32_t mask, mem_align, offset_align;
    std::memcpy(&mask, raw, sizeof mask);
    std::memcpy(&mem_align, raw + statx_dio_mem_align_offset, sizeof mem_align);
    std::memcpy(&offset_align, raw + statx_dio_offset_align_offset, sizeof offset_align);
    if ((mask & statx_dioalign) != 0 && offset_align != 0) {
      const std::uint32_t a = mem_align > offset_align ? mem_align : offset_align;
      if ((a & (a - 1)) == 0 && a <= max_direct_alignment) return a < 512 ? 512 : a;
    }
  }
  // Needs two 512-byte blocks to tell an unaligned offset from EOF.
  if (size >= 2 * nvme::block_size &&
      probe_direct_read(fd, nvme::block_size, nvme::block_size, nvme::block_size) == 0)
    return nvme::block_size;
  return 4096;
}

// Only regular files and block devices hold an array; anything else is
// refused with what it is.
void refuse_unsupported_kind(const std::string& path, mode_t mode) {
  if (S_ISREG(mode) || S_ISBLK(mode)) return;
  if (S_ISDIR(mode))
    throw invalid_argument("warpstore: '" + path + "' is a directory, not a file", path);
  const char* kind = S_ISCHR(mode)    ? "a character device"
                     : S_ISFIFO(mode) ? "a FIFO (named pipe)"
                     : S_ISSOCK(mode) ? "a socket"
                                      : "not a regular file";
  throw invalid_argument("warpstore: '" + path + "' is " + kind +
                             ": only regular files and block devices are supported",
                         path);
}

struct flock range_flock(short type, std::uint64_t first, std::uint64_t end) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(first);
  fl.l_len = static_cast<off_t>(end - first);
  fl.l_pid = 0;  // F_OFD_* require it
  return fl;
}

}  // namespace

namespace detail {

double sample_resident_share(int fd, std::uint64_t size) {
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0 || size == 0) return -1;
  const std::uint64_t pages = (size + static_cast<std::uint64_t>(page) - 1) / static_cast<std::uint64_t>(page);
  const std::uint64_t samples = pages < 256 ? pages : 256;
  std::uint64_t resident = 0;
  for (std::uint64_t k = 0; k < samples; ++k) {
    const std::uint64_t p = k * pages / samples;
    void* m = ::mmap(nullptr, static_cast<std::size_t>(page), PROT_READ, MAP_SHARED, fd,
                     static_cast<off_t>(p * static_cast<std::uint64_t>(page)));
    if (m == MAP_FAILED) return -1;
    unsigned char in = 0;
    const int r = ::mincore(m, static_cast<std::size_t>(page), &in);
    ::munmap(m, static_cast<std::size_t>(page));
    if (r != 0) return -1;
    resident += in & 1u;
  }
  return static_cast<double>(resident) / static_cast<double>(samples);
}

}  // namespace detail

backing_file::backing_file(const std::string& path, direct_io mode, file_access access)
    : path_(path), access_(access) {
  if (path.empty()) throw invalid_argument("warpstore: backing file path is empty");
  // Look before opening: an open of a FIFO waits for a writer, and a
  // directory or device refused by open() would get a less clear message.
  {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) refuse_unsupported_kind(path, st.st_mode);
  }

  bool direct = mode != direct_io::off;
  fd_ = open_file(path, direct, access);
  if (fd_ < 0 && errno == EINVAL && mode == direct_io::automatic) {
    // The filesystem refuses O_DIRECT (tmpfs before 6.6, some FUSE mounts).
    direct = false;
    fd_ = open_file(path, false, access);
  }
  if (fd_ < 0) {
    const int err = errno;
    if (err == EINVAL && mode == direct_io::on)
      throw_errno(err, "O_DIRECT is not supported (direct I/O is 'on') for", path);
    throw_errno(err, "cannot open", path);
  }
  // From here on the destructor will not run if we throw: close by hand.
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw_errno(errno, "cannot stat", path);
    refuse_unsupported_kind(path, st.st_mode);  // it may have changed since the stat
    if (S_ISREG(st.st_mode)) {
      size_ = static_cast<std::uint64_t>(st.st_size);
      if (direct) direct_alignment_ = file_direct_alignment(fd_, size_);
    } else if (S_ISBLK(st.st_mode)) {
      std::uint64_t bytes = 0;
      if (::ioctl(fd_, BLKGETSIZE64, &bytes) != 0)
        throw_errno(errno, "cannot get the size (BLKGETSIZE64) of block device", path);
      size_ = bytes;
      int sector = 0;
      if (::ioctl(fd_, BLKSSZGET, &sector) != 0)
        throw_errno(errno, "cannot get the logical block size (BLKSSZGET) of block device", path);
      // Commands address 512-byte blocks, and a line must hold whole logical
      // blocks of the device.
      if (sector <= 0 || sector % static_cast<int>(nvme::block_size) != 0 ||
          sector > static_cast<int>(max_direct_alignment))
        throw invalid_argument("warpstore: block device '" + path +
                                   "' has a logical block size of " + std::to_string(sector) +
                                   " bytes: only multiples of 512 up to 65536 are supported",
                               path);
      block_device_ = true;
      logical_block_size_ = static_cast<std::uint32_t>(sector);
      direct_alignment_ = logical_block_size_;
    }

    // Some filesystems accept O_DIRECT at open and refuse it at the first
    // read: find out now rather than on the first command.
    if (direct && size_ >= direct_alignment_) {
      const int err = probe_direct_read(fd_, 0, direct_alignment_, direct_alignment_);
      if (err == EINVAL && mode == direct_io::automatic) {
        ::close(fd_);
        fd_ = open_file(path, false, access);
        if (fd_ < 0) throw_errno(errno, "cannot reopen without O_DIRECT", path);
        direct = false;
      } else if (err != 0) {
        throw_errno(
            err,
            "O_DIRECT read of the first " + std::to_string(direct_alignment_) + " bytes failed on",
            path);
      }
    }
    // Automatic mode: data already in the page cache is read from there.
    // O_DIRECT would send every read to the device (a pointer chase over a
    // cached 4 GiB file ran 30x slower that way); data that is not cached
    // goes direct, with no double copy and no cache pollution.
    if (direct && mode == direct_io::automatic) {
      const int probe = open_file(path, false, file_access::read_only);
      const double share = probe >= 0 ? detail::sample_resident_share(probe, size_) : -1;
      if (probe >= 0) ::close(probe);
      resident_share_ = share;
      if (share >= 0.5) {
        ::close(fd_);
        fd_ = open_file(path, false, access);
        if (fd_ < 0) throw_errno(errno, "cannot reopen without O_DIRECT", path);
        direct = false;
      }
    }
    direct_ = direct;
    if (!direct_) direct_alignment_ = nvme::block_size;
    if (direct_ && access == file_access::read_write) {
      buffered_fd_ = open_file(path, false, access);
      if (buffered_fd_ < 0) throw_errno(errno, "cannot open (buffered, for tail writes)", path);
    }
  } catch (...) {
    if (fd_ >= 0) ::close(fd_);
    if (buffered_fd_ >= 0) ::close(buffered_fd_);
    fd_ = -1;
    buffered_fd_ = -1;
    throw;
  }
}

std::shared_ptr<backing_file> backing_file::device_namespace(std::string name, std::uint64_t bytes,
                                                            file_access access) {
  std::shared_ptr<backing_file> f(new backing_file(std::move(name), access));
  f->size_ = bytes;
  f->block_device_ = true;
  return f;
}

backing_file::~backing_file() {
  if (fd_ >= 0) ::close(fd_);
  if (buffered_fd_ >= 0) ::close(buffered_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::uint64_t backing_file::capacity_blocks() const {
  return (size_ + nvme::block_size - 1) >> nvme::block_shift;
}

std::string to_string(const file_range_lock::range& r) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict) on "[" + std::to_string(...).
  std::string s("[");
  s += std::to_string(r.first);
  s += ", ";
  s += r.end == std::numeric_limits<std::uint64_t>::max() ? std::string("end of file")
                                                          : std::to_string(r.end);
  s += ")";
  return s;
}

file_range_lock backing_file::lock_range(std::uint64_t first, std::uint64_t end) const {
  const std::string bytes = to_string(file_range_lock::range{first, end});
  if (end <= first)
    throw invalid_argument("warpstore: cannot lock the empty byte range " + bytes + " of '" +
                               path_ + "'",
                           path_, first);
  file_range_lock lock;
  lock.bytes_ = {first, end};
  if (fd_ < 0) return lock;  // a device namespace: VFIO excludes other processes
  const std::lock_guard<std::mutex> guard(locks_mutex_);
  if (lock_fd_ < 0) {
    // The same file even if its path was renamed or replaced since: reopen
    // fd_ through /proc (a new description of the same inode), or the path
    // where /proc is not mounted, then make sure it is the same inode.
    int fd = open_file("/proc/self/fd/" + std::to_string(fd_), false, access_);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) fd = open_file(path_, false, access_);
    if (fd < 0) throw_errno(errno, "cannot open (for its byte-range locks)", path_);
    struct stat mine {}, other {};
    if (::fstat(fd_, &mine) != 0 || ::fstat(fd, &other) != 0 || mine.st_dev != other.st_dev ||
        mine.st_ino != other.st_ino) {
      ::close(fd);
      throw file_error(ESTALE,
                       "warpstore: '" + path_ + "' is no longer the file this array opened: "
                       "cannot lock its bytes",
                       path_);
    }
    lock_fd_ = fd;
  }
  // A refused lock is looked up with F_OFD_GETLK, which may find that the
  // other writer let go meanwhile: then try again, a few times.
  for (int attempt = 0;; ++attempt) {
    struct flock fl = range_flock(F_WRLCK, first, end);
    if (::fcntl(lock_fd_, F_OFD_SETLK, &fl) == 0) {
      held_.push_back(lock.bytes_);
      lock.file_ = this;
      return lock;
    }
    const int err = errno;
    if (err == EINVAL || err == ENOLCK || err == EOPNOTSUPP) return lock;  // no OFD locks here
    if (err != EAGAIN && err != EACCES)
      throw_errno(err, "cannot lock bytes " + bytes + " (F_OFD_SETLK) of", path_);
    struct flock other = range_flock(F_WRLCK, first, end);
    if (::fcntl(lock_fd_, F_OFD_GETLK, &other) != 0)
      throw_errno(errno, "cannot look up the lock on bytes " + bytes + " (F_OFD_GETLK) of", path_);
    if (other.l_type != F_UNLCK) {
      const auto at = static_cast<std::uint64_t>(other.l_start);
      lock.conflict_ = file_range_lock::range{
          at, other.l_len == 0 ? std::numeric_limits<std::uint64_t>::max()
                               : at + static_cast<std::uint64_t>(other.l_len)};
      return lock;
    }
    if (attempt == 3) {  // the range keeps changing hands: name the whole of it
      lock.conflict_ = lock.bytes_;
      return lock;
    }
  }
}

void backing_file::unlock_range(const file_range_lock::range& r) const noexcept {
  const std::lock_guard<std::mutex> guard(locks_mutex_);
  bool found = false;
  for (std::size_t i = 0; i < held_.size() && !found; ++i) {
    if (held_[i].first == r.first && held_[i].end == r.end) {
      held_[i] = held_.back();
      held_.pop_back();
      found = true;
    }
  }
  if (!found) return;
  // Within r, unlock the gaps the remaining locks leave (one OFD lock table
  // entry serves them all: unlocking a byte unlocks it for every one).
  std::uint64_t at = r.first;
  while (at < r.end) {
    std::uint64_t covered = at;
    for (const auto& h : held_)
      if (h.first <= at && h.end > covered) covered = h.end;
    if (covered > at) {
      at = covered;
      continue;
    }
    std::uint64_t gap_end = r.end;
    for (const auto& h : held_)
      if (h.first > at && h.first < gap_end) gap_end = h.first;
    struct flock fl = range_flock(F_UNLCK, at, gap_end);
    // Cannot fail on a range it holds; closing lock_fd_ would free it anyway.
    (void)::fcntl(lock_fd_, F_OFD_SETLK, &fl);
    at = gap_end;
  }
}

file_range_lock::file_range_lock(file_range_lock&& o) noexcept
    : file_(std::exchange(o.file_, nullptr)), bytes_(o.bytes_), conflict_(o.conflict_) {}

file_range_lock& file_range_lock::operator=(file_range_lock&& o) noexcept {
  if (this != &o) {
    release();
    file_ = std::exchange(o.file_, nullptr);
    bytes_ = o.bytes_;
    conflict_ = o.conflict_;
  }
  return *this;
}

void file_range_lock::release() noexcept {
  if (file_ != nullptr) file_->unlock_range(bytes_);
  file_ = nullptr;
}

}  // namespace warpstore
