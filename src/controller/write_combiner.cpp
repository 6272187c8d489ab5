// Write combining: the write thread that sorts the buffered WRITEs of every
// service thread by offset and writes neighbours with one pwritev, the
// write-behind thread, and the service thread's side of the hand-over
// (results coming back).
#include "controller/write_combiner.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <exception>
#include <string>

#include "controller/service_common.h"
#include "controller/service_thread.h"

namespace warpstore {

using host_detail::steady_ns;

// The service thread's side: results the write thread hands back.
void host_controller::worker::writes_done(const write_combiner::item* first, std::size_t n) {
  {
    std::lock_guard<std::mutex> lock(done_mutex_);
    done_.insert(done_.end(), first, first + n);
  }
  done_ready_.store(true, std::memory_order_release);
}

bool host_controller::worker::collect_writes() {
  if (!done_ready_.load(std::memory_order_acquire)) return false;
  {
    std::lock_guard<std::mutex> lock(done_mutex_);
    done_local_.swap(done_);
    done_ready_.store(false, std::memory_order_relaxed);
  }
  for (const write_combiner::item& it : done_local_) {
    --combining_;
    on_result(*static_cast<command_ctx*>(it.context), it.result);
  }
  done_local_.clear();
  return true;
}

// ---------------------------------------------------------------------------

void host_controller::write_combiner::run() noexcept {
  std::vector<item> batch;
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return !pending_.empty() || stopping_; });
        if (pending_.empty()) return;  // stopping, nothing left
        batch.swap(pending_);
      }
      execute(batch);
      batch.clear();
    }
  } catch (const std::exception& e) {
    owner_.record_failure(std::string("host controller write thread stopped: ") + e.what());
  } catch (...) {
    owner_.record_failure("host controller write thread stopped: unknown exception");
  }
}

// Starts writeback of the whole file's dirty pages each time the write thread
// says enough was written. sync_file_range(WRITE) neither waits for the pages
// nor makes anything durable (FLUSH does, with fdatasync); it only moves the
// disk's work ahead, off the write thread. A failure here is left to the
// fdatasync, which reports writeback errors itself.
void host_controller::write_combiner::run_behind() noexcept {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(behind_mutex_);
      behind_wake_.wait(lock, [this] { return behind_due_ || behind_stopping_; });
      if (behind_stopping_) return;
      behind_due_ = false;
    }
    (void)::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
    owner_.counters_.write_behind_starts.fetch_add(1, std::memory_order_relaxed);
  }
}

// Sorts the batch by offset, writes each run of neighbours with pwritev, and
// hands each run's results back to their service threads.
void host_controller::write_combiner::execute(std::vector<item>& batch) {
  std::sort(batch.begin(), batch.end(),
            [](const item& a, const item& b) { return a.offset < b.offset; });
  owner_.counters_.combined_writes.fetch_add(batch.size(), std::memory_order_relaxed);
  owner_.counters_.write_batches.fetch_add(1, std::memory_order_relaxed);
  constexpr std::size_t max_run_bytes = std::size_t{64} << 20;
  std::size_t i = 0;
  while (i < batch.size()) {
    std::size_t j = i + 1, bytes = batch[i].bytes;
    while (j < batch.size() && j - i < IOV_MAX && bytes + batch[j].bytes <= max_run_bytes &&
           batch[j].offset == batch[j - 1].offset + batch[j - 1].bytes) {
      bytes += batch[j].bytes;
      ++j;
    }
    const std::uint64_t started = steady_ns();
    write_run(&batch[i], j - i);
    owner_.counters_.write_ns.fetch_add(steady_ns() - started, std::memory_order_relaxed);
    owner_.counters_.write_calls.fetch_add(1, std::memory_order_relaxed);
    unstarted_bytes_ += bytes;
    // Back to the owners now, not after the whole batch: a batch can take
    // milliseconds, and GPU warps wait on these completions.
    for (std::size_t k = i; k < j;) {
      std::size_t e = k + 1;
      while (e < j && batch[e].owner == batch[k].owner) ++e;
      batch[k].owner->writes_done(&batch[k], e - k);
      k = e;
    }
    i = j;
  }
  if (write_behind_bytes_ != 0 && unstarted_bytes_ >= write_behind_bytes_) {
    unstarted_bytes_ = 0;
    {
      std::lock_guard<std::mutex> lock(behind_mutex_);
      behind_due_ = true;
    }
    behind_wake_.notify_one();
  }
}

// One pwritev for n neighbouring WRITEs. A failure is attributed command by
// command: what the run wrote counts, the rest is retried one by one.
void host_controller::write_combiner::write_run(item* first, std::size_t n) {
  iov_.resize(n);
  std::size_t total = 0;
  for (std::size_t k = 0; k < n; ++k) {
    iov_[k] = iovec{const_cast<std::byte*>(first[k].data), first[k].bytes};
    total += first[k].bytes;
  }
  std::size_t done = 0, at = 0;  // bytes written; first iovec not fully written
  int err = 0;
  while (done < total) {
    const ssize_t r = ::pwritev(fd_, iov_.data() + at, static_cast<int>(n - at),
                                static_cast<off_t>(first[0].offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      err = r < 0 ? errno : EIO;
      break;
    }
    done += static_cast<std::size_t>(r);
    for (std::size_t left = static_cast<std::size_t>(r); left > 0 && at < n;) {
      if (left >= iov_[at].iov_len) {
        left -= iov_[at].iov_len;
        ++at;
      } else {
        iov_[at].iov_base = static_cast<char*>(iov_[at].iov_base) + left;
        iov_[at].iov_len -= left;
        left = 0;
      }
    }
  }
  std::size_t offset_in_run = 0;
  for (std::size_t k = 0; k < n; ++k) {
    item& it = first[k];
    if (err == 0 || offset_in_run + it.bytes <= done) {
      it.result = static_cast<int>(it.bytes);
    } else {
      // Alone, so its own errno (or short count) is what it reports.
      ssize_t r;
      do {
        r = ::pwrite(fd_, it.data, it.bytes, static_cast<off_t>(it.offset));
      } while (r < 0 && errno == EINTR);
      it.result = r < 0 ? -errno : static_cast<int>(r);
    }
    offset_in_run += it.bytes;
  }
}

}  // namespace warpstore
