// Controllers: what executes the NVMe commands GPU threads submit. Kernels
// never know which controller serves them; they hold an io_ref (io.cuh).
//
//   host    CPU service threads poll the submission doorbells and execute
//           commands on a file or block device with io_uring (default).
//   memory  the file's bytes sit in pinned host memory; the submitting warp
//           executes its own command over PCIe, with no CPU on the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "warpstore/io.cuh"
#include "warpstore/settings.h"

namespace warpstore {

enum class file_access { read_only, read_write };

class backing_file;

// A write lock on bytes [first, end) of a backing_file
// (backing_file::lock_range), released when this goes away or is moved from.
// Not held where another writer holds part of the range (conflict() says
// what it holds) or where the filesystem has no OFD locks (no conflict).
class file_range_lock {
 public:
  struct range {
    std::uint64_t first = 0;
    std::uint64_t end = 0;  // one past the last byte; UINT64_MAX: to the end of the file and beyond
  };

  file_range_lock() = default;
  file_range_lock(file_range_lock&& o) noexcept;
  file_range_lock& operator=(file_range_lock&& o) noexcept;
  ~file_range_lock() { release(); }

  bool held() const { return file_ != nullptr; }
  // The range asked for (held or not).
  const range& bytes() const { return bytes_; }
  // Not held because another open file description holds some of the range:
  // the range of the first such lock F_OFD_GETLK reported.
  const std::optional<range>& conflict() const { return conflict_; }

 private:
  friend class backing_file;
  void release() noexcept;
  const backing_file* file_ = nullptr;
  range bytes_;
  std::optional<range> conflict_;
};

// "[first, end)", or "[first, end of file)".
std::string to_string(const file_range_lock::range& r);

// A file or block device opened for a controller.
class backing_file {
 public:
  // Opens `path` read-only or read-write. With direct_io::on the open must
  // succeed with O_DIRECT; with direct_io::automatic it falls back to
  // buffered I/O.
  backing_file(const std::string& path, direct_io mode,
               file_access access = file_access::read_only);
  // A namespace of a device this process drives itself (the nvme
  // controller): `bytes` of raw blocks named `name` ("nvme://0000:65:00.0/ns1")
  // in messages, with no descriptor (fd() is -1). The controller moves every
  // byte; nothing reads it through a file. lock_range takes no lock: VFIO
  // lets one process at a time open the device's group, so no other process
  // writes it.
  static std::shared_ptr<backing_file> device_namespace(std::string name, std::uint64_t bytes,
                                                        file_access access);
  ~backing_file();
  backing_file(const backing_file&) = delete;
  backing_file& operator=(const backing_file&) = delete;

  int fd() const { return fd_; }
  // A device namespace (device_namespace()), not a file.
  bool is_device_namespace() const { return fd_ < 0; }
  // A buffered descriptor of the same file: fd() itself unless it is
  // O_DIRECT. Writes of a partial last block go through it, since an
  // aligned O_DIRECT write there would grow the file.
  int buffered_fd() const { return buffered_fd_ >= 0 ? buffered_fd_ : fd_; }
  bool writable() const { return access_ == file_access::read_write; }
  bool direct() const { return direct_; }
  // direct_io::automatic: the share of sampled pages found in the page cache
  // when the file was opened (at least half: buffered, else O_DIRECT); -1 when
  // not measured (another mode, O_DIRECT refused, or mincore unavailable).
  double resident_share() const { return resident_share_; }
  const std::string& path() const { return path_; }
  std::uint64_t size_bytes() const { return size_; }
  // Namespace capacity in logical blocks; a partial last block counts.
  std::uint64_t capacity_blocks() const;
  // Alignment O_DIRECT needs for offsets, lengths and buffers.
  std::uint32_t direct_alignment() const { return direct_alignment_; }
  // A block device (sized with BLKGETSIZE64) rather than a regular file.
  bool block_device() const { return block_device_; }
  // The device's logical block size (BLKSSZGET, a multiple of 512); 512 for a
  // regular file.
  std::uint32_t logical_block_size() const { return logical_block_size_; }

  // Takes a write lock on bytes [first, end) of the file without waiting:
  // an OFD lock (fcntl F_OFD_SETLK), which belongs to an open file
  // description of this backing_file's own, opened for the locks alone (not
  // fd(): the io_uring that reads fd() keeps its description alive after a
  // killed process is reaped, until the kernel tears the ring down, and a
  // lock on it would refuse a restarted writer meanwhile). Locks of other
  // descriptions conflict, whether they belong
  // to another process or to another backing_file of this one (each
  // controller opens the file anew); locks through this backing_file never
  // conflict with each other, so arrays sharing a controller do not
  // exclude one another. Overlapping ranges taken here are counted: a
  // released lock frees only the bytes no other lock of this backing_file
  // still covers. The lock is advisory: it excludes other writers that take
  // one (every writable array does), not reads or plain writes.
  // Where another description holds some of the range, takes nothing and
  // returns a lock whose conflict() names that writer's range. Where the
  // filesystem has no OFD locks (EINVAL, ENOLCK, EOPNOTSUPP: some network
  // and FUSE filesystems), takes nothing and returns a lock neither held nor
  // in conflict: overlapping writers then go undetected. Raises file_error
  // for any other failure.
  file_range_lock lock_range(std::uint64_t first, std::uint64_t end) const;

 private:
  friend class file_range_lock;
  backing_file(std::string name, file_access access) : path_(std::move(name)), access_(access) {}
  // Drops `r`, one of held_, and unlocks what no other range of held_ covers.
  void unlock_range(const file_range_lock::range& r) const noexcept;

  std::string path_;
  file_access access_;
  int fd_ = -1;
  int buffered_fd_ = -1;
  // The description the range locks are taken on, opened at the first
  // lock_range (under locks_mutex_).
  mutable int lock_fd_ = -1;
  bool direct_ = false;
  double resident_share_ = -1;
  std::uint64_t size_ = 0;
  std::uint32_t direct_alignment_ = 512;
  bool block_device_ = false;
  std::uint32_t logical_block_size_ = 512;
  // The ranges lock_range took, one entry per lock (they may overlap). The
  // locks change the lock table, not the file: lock_range is const.
  mutable std::mutex locks_mutex_;
  mutable std::vector<file_range_lock::range> held_;
};

// Counters every controller keeps, read on the host.
struct controller_stats {
  std::uint64_t commands = 0;
  std::uint64_t errors = 0;
  std::uint64_t bytes = 0;
  std::uint64_t doorbells = 0;  // doorbell reads that found new entries
  // Host controller, buffered writes through its write thread: WRITE
  // commands, the pwritev calls that carried them, and the batches (what was
  // pending each time the write thread looked) they were merged within.
  std::uint64_t combined_writes = 0;
  std::uint64_t write_calls = 0;
  std::uint64_t write_batches = 0;
  std::uint64_t write_behind_starts = 0;  // sync_file_range calls (write-behind)
  // Host controller, read combining: READ commands that went out in a run
  // of neighbours, and the readv calls that carried them.
  std::uint64_t combined_reads = 0;
  std::uint64_t read_runs = 0;
  // Host controller, read-ahead (options::read_ahead): extents read whole,
  // and READs served from them with a copy.
  std::uint64_t read_ahead_loads = 0;
  std::uint64_t read_ahead_lines = 0;
  // Misses in one extent that read it whole now: 3 to start, more where
  // extents served fewer lines than they cost (0: no read-ahead).
  std::uint32_t read_ahead_trigger = 0;
  // Nanoseconds the write thread spent in pwritev: against the time a
  // kernel took, whether the write thread bounded it.
  std::uint64_t write_ns = 0;
  // Host controller: nanoseconds FLUSH commands spent in fdatasync (summed
  // over commands; overlapping ones count each).
  std::uint64_t sync_ns = 0;
};

// What the process's bulk reads (array_base::read_range, Array.read) did
// since the process (a forked child: since its first bulk read) made its
// reader: where a slow read's time went. Times in nanoseconds; those marked
// "summed" add up every thread of a call (the caller and its helpers).
struct bulk_read_stats {
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;
  std::uint64_t chunks = 0;
  std::uint64_t caller_chunks = 0;  // chunks the calling threads read themselves
  std::uint64_t lanes = 0;          // lanes the calls took, summed over calls
  std::uint64_t call_ns = 0;        // calls' wall time
  std::uint64_t read_ns = 0;        // summed: in pread
  std::uint64_t buffer_wait_ns = 0; // summed: waiting for a pinned buffer's last copy
  std::uint64_t drain_ns = 0;       // summed: waiting for a thread's copies at its end
  std::uint64_t wake_ns = 0;        // summed over helpers: from hand-out to their first chunk
  std::uint64_t helpers = 0;        // helpers handed a call, summed over calls
};
bulk_read_stats bulk_read_totals();

class controller {
 public:
  virtual ~controller() = default;
  virtual const char* name() const = 0;
  // The view kernels use to reach this controller.
  virtual io_ref device_ref() const = 0;
  virtual controller_stats stats() const = 0;
  // The file's own page-cache pages, mapped and pinned, where kernels read
  // them rather than a copy (the memory controller over a read-only file):
  // byte i of the file at [i]. Bulk reads into GPU memory copy from there
  // (bulk_reader::copy_pinned). nullptr for every other controller.
  virtual const std::byte* mapped_file() const { return nullptr; }
  bool maps_file() const { return mapped_file() != nullptr; }
  // Raises if the controller failed outside any one command (a service
  // thread died, io_uring could not be set up).
  virtual void check() const {}
  // Makes every write this controller has completed durable, for what the
  // FLUSH command through the queues cannot reach (the memory controller:
  // writes back its dirty pinned pages and fdatasyncs). Host controller:
  // nothing, FLUSH already was an fdatasync. Raises on failure.
  virtual void make_durable() {}
  // Forgets what the controller holds of the file's bytes outside the GPU
  // cache (the host controller's read-ahead extents), so that misses after a
  // cache clear read the file as it is now. The memory controller's pinned
  // copy of a file it could not map stays the file as it was at open.
  virtual void forget_file_bytes() {}
  // Announces work: kernels over this controller's arrays are about to run
  // (begin) or have ended (end); calls nest and may come from any thread.
  // Between them the host controller's service threads poll at full speed;
  // with none open they sleep soon after the last command, and an
  // unannounced command then waits up to a couple of milliseconds for a
  // thread to wake. The Python gathers announce themselves; C++ code that
  // launches its own kernels may hold an activity_scope around them.
  virtual void begin_activity() {}
  virtual void end_activity() {}
  // Whether begin/end_activity do anything (the host controller's service
  // threads): a caller with nothing to announce skips the bookkeeping (a
  // Python gather then needs no host callback on its stream).
  virtual bool announces_activity() const { return false; }
  // Wakes sleeping service threads without holding them awake: a kernel is
  // probably coming (array::ref() calls it). They fall asleep again after a
  // short quiet if nothing arrives.
  virtual void wake() {}
  // A mark of what kernels have submitted (the host controller: its SQ
  // tail doorbells, hashed): a waiter that sees it change knows commands
  // went out, and wakes the service threads only then (a gather that hits
  // sends none). 0 where nothing announces activity.
  virtual std::uint64_t submission_mark() const { return 0; }
  const backing_file& file() const { return *file_; }
  // Bytes, aligned in the file, that this controller rewrites whole when it
  // writes any byte of them: 1 where a WRITE touches exactly its own blocks
  // (host); the memory controller writes back whole dirty 64 KiB chunks
  // from its copy of the file. A writable array's write lock covers them.
  virtual std::uint64_t write_unit() const { return 1; }

 protected:
  explicit controller(std::shared_ptr<backing_file> file) : file_(std::move(file)) {}
  std::shared_ptr<backing_file> file_;
};

// Holds a controller awake for the scope's lifetime (begin_activity /
// end_activity).
class activity_scope {
 public:
  explicit activity_scope(controller& c) : c_(c) { c_.begin_activity(); }
  ~activity_scope() { c_.end_activity(); }
  activity_scope(const activity_scope&) = delete;
  activity_scope& operator=(const activity_scope&) = delete;

 private:
  controller& c_;
};

// Opens the controller `opts.controller` over `path`.
std::shared_ptr<controller> make_controller(const std::string& path, const options& opts);

}  // namespace warpstore
