// host_controller::write_combiner: the one write thread that executes the
// buffered WRITEs of every service thread (and, with write_behind_bytes, the
// write-behind thread that starts writeback). Private to src/controller/.
#pragma once

#include <sys/uio.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "controller/host_controller.h"

namespace warpstore {

// Buffered WRITEs of every service thread, executed by one thread. ext4
// runs buffered writes to one file one at a time anyway (the inode lock;
// io_uring hashes them all to one kernel worker), so one thread loses
// nothing, and sorting what is pending by offset merges neighbours into one
// pwritev: evicted lines of a streaming kernel are mostly neighbours, and one
// call per few hundred KiB costs far less than one per line.
class host_controller::write_combiner {
 public:
  struct item {
    worker* owner;
    void* context;  // the owner's command
    std::uint64_t offset;
    const std::byte* data;
    std::uint32_t bytes;
    int result;  // bytes written, or -errno
  };

  write_combiner(host_controller& owner, int fd, std::uint64_t write_behind_bytes)
      : owner_(owner), fd_(fd), write_behind_bytes_(write_behind_bytes) {}
  // Hands over a service thread's round of WRITEs under one lock, so that
  // neighbours fetched together reach the same batch.
  void push(const std::vector<item>& items) {
    bool was_empty;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      was_empty = pending_.empty();
      pending_.insert(pending_.end(), items.begin(), items.end());
    }
    if (was_empty) wake_.notify_one();
  }
  // Thread body: runs until stop() with nothing pending.
  void run() noexcept;
  // Write-behind thread body (options::write_behind_bytes): runs until stop().
  void run_behind() noexcept;
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    {
      std::lock_guard<std::mutex> lock(behind_mutex_);
      behind_stopping_ = true;
    }
    behind_wake_.notify_one();
  }

 private:
  void execute(std::vector<item>& batch);
  void write_run(item* first, std::size_t n);

  host_controller& owner_;
  const int fd_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<item> pending_;
  bool stopping_ = false;
  std::vector<iovec> iov_;
  // Write-behind: bytes written since the last start, and the hand-over to
  // its thread.
  const std::uint64_t write_behind_bytes_;
  std::uint64_t unstarted_bytes_ = 0;
  std::mutex behind_mutex_;
  std::condition_variable behind_wake_;
  bool behind_due_ = false;
  bool behind_stopping_ = false;
};

}  // namespace warpstore
