// Bulk reads of a file range into GPU or host memory (bulk_reader.h): chunks
// at fixed file offsets, taken in turn by the caller and the helpers of its
// lanes, each read with pread (into the destination, or into one of the
// lane's two pinned buffers while its stream copies the other to the GPU).
#include "controller/bulk_reader.h"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <utility>

#include "controller/service_common.h"
#include "warpstore/error.h"
#include "warpstore/runtime.h"
#include "warpstore/settings.h"

namespace warpstore::host_detail {

namespace {

std::mutex reader_mutex;
// The process's reader, kept until exit and never destroyed (its helpers
// may still sleep then); reader_pid: the process that made it.
std::shared_ptr<bulk_reader>* reader_instance = nullptr;
pid_t reader_pid = 0;

std::uint64_t round_down(std::uint64_t x, std::uint64_t a) { return x / a * a; }
std::uint64_t round_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

error_info cancelled_info(const std::string& path, std::uint64_t offset) {
  error_info i;
  i.kind = error_kind::cancelled;
  i.path = path;
  i.offset = offset;
  return i;
}

// Reads [pos, pos + len) of `file` into buf, needing at least `need` bytes
// (the rest of an O_DIRECT window may lie past the end of the file).
void read_span(const backing_file& file, std::byte* buf, std::uint64_t pos, std::uint64_t len,
               std::uint64_t need) {
  std::uint64_t got = 0;
  while (got < need) {
    const ssize_t r = ::pread(file.fd(), buf + got, len - got, static_cast<off_t>(pos + got));
    if (r < 0) {
      const int err = errno;
      if (err == EINTR || err == EAGAIN) continue;
      throw file_error(err,
                       "warpstore: bulk read of " + std::to_string(len - got) + " bytes at offset " +
                           std::to_string(pos + got) + " of '" + file.path() +
                           "' failed: " + errno_text(err),
                       file.path(), pos + got);
    }
    const bool unaligned_direct =
        file.direct() && (static_cast<std::uint64_t>(r) % file.direct_alignment()) != 0;
    got += static_cast<std::uint64_t>(r);
    // End of file (or an O_DIRECT read that stopped at it) before the bytes
    // the array had when it was opened.
    if ((r == 0 || unaligned_direct) && got < need) {
      struct stat st {};
      const std::string now = ::fstat(file.fd(), &st) == 0
                                  ? "; it is now " + std::to_string(st.st_size) + " bytes"
                                  : std::string();
      throw file_error(EIO,
                       "warpstore: bulk read hit the end of '" + file.path() + "' at offset " +
                           std::to_string(pos + got) + ", before offset " +
                           std::to_string(pos + need) + " (the file shrank: it had " +
                           std::to_string(file.size_bytes()) + " bytes at open" + now + ")",
                       file.path(), pos + got);
    }
  }
}

}  // namespace

// One thread's share: two pinned bounce buffers (made on first use), the
// stream that copies them to the GPU (made on first use, per device), and
// the helper thread that works the lane when a call other than its caller
// takes it. The fields below `uploads` are under the reader's mutex_.
struct bulk_reader::lane {
  runtime::host_pinned_ptr<std::byte> buffers[2];
  std::unique_ptr<runtime::upload_stream> uploads;
  std::thread thread;
  bool running = false;  // the helper thread runs (it may be leaving: join before a new one)
  bool taken = false;    // a call holds the lane
  call* job = nullptr;   // the call its helper is to work for
  std::condition_variable wake;
  std::byte* buffer(unsigned k, std::uint64_t bytes) {
    if (!buffers[k & 1]) buffers[k & 1] = runtime::make_host_pinned<std::byte>(bytes);
    return buffers[k & 1].get();
  }
};

// What the threads of one read share.
struct bulk_reader::call {
  const backing_file* file = nullptr;
  std::uint64_t offset = 0, end = 0;  // file bytes [offset, end)
  std::byte* dst = nullptr;
  std::uintptr_t stream = 0;
  bool device = false;  // dst is GPU memory
  std::uint64_t first_chunk = 0, chunks = 0;
  const std::function<bool()>* interrupt = nullptr;
  std::atomic<std::uint64_t> next{0};
  std::uint64_t chunk = 0;  // this call's chunk size
  std::atomic<bool> stop{false};
  std::uint64_t handed_at = 0;  // steady_ns() as the helpers were woken
  std::mutex m;
  std::condition_variable helpers_done;
  unsigned helpers = 0;      // under m: helpers still working for the call
  std::exception_ptr error;  // the first, under m
  bool cancelled = false;    // under m

  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(m);
    if (!error && !cancelled) error = std::move(e);
    stop.store(true, std::memory_order_relaxed);
  }
};

unsigned bulk_reader::default_threads() {
  // Three quarters of the cores the process may use (process_cores(): its
  // affinity mask, shared among torchrun's local processes). More does not
  // pay: on the 16-core H100 machine 1 GiB from the page cache read at
  // 42.5-46.2 GB/s with 12 threads and 41.4-47.4 with 16, alternating in
  // one run (bench/python_bulk.py, BENCHMARKS.md "Bulk reads").
  const unsigned cores = process_cores();
  return std::clamp(cores - cores / 4, 1u, max_threads);
}

std::shared_ptr<bulk_reader> bulk_reader::acquire() {
  std::lock_guard<std::mutex> lock(reader_mutex);
  if (reader_instance == nullptr || reader_pid != ::getpid()) {
    // First use, or a forked child: the parent's helpers did not come along
    // and its locks may be held forever, so the child's arrays get a reader
    // of their own; the parent's is left alone (never destroyed).
    reader_instance = new std::shared_ptr<bulk_reader>(std::make_shared<bulk_reader>());
    reader_pid = ::getpid();
  }
  return *reader_instance;
}

bulk_reader::bulk_reader() : bulk_reader(config{}) {}

bulk_reader::bulk_reader(config c)
    : chunk_(c.chunk_bytes),
      threads_(c.threads == 0 ? default_threads() : c.threads),
      linger_ns_(c.linger_ns) {
  if (chunk_ == 0 || chunk_ % chunk_granule != 0 || chunk_ > max_chunk_bytes)
    throw invalid_argument("bulk reader: chunk size " + std::to_string(chunk_) +
                           " must be a multiple of " + std::to_string(chunk_granule) + " up to " +
                           std::to_string(max_chunk_bytes));
  if (threads_ > max_threads)
    throw invalid_argument("bulk reader: " + std::to_string(threads_) + " threads, at most " +
                           std::to_string(max_threads));
}

bulk_reader::~bulk_reader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (const auto& l : lanes_) l->wake.notify_all();
  }
  for (const auto& l : lanes_)
    if (l->thread.joinable()) l->thread.join();
}

std::uint64_t bulk_reader::call_chunk_bytes(std::uint64_t bytes) const {
  const std::uint64_t floor = std::min(chunk_, min_call_chunk_bytes);
  const std::uint64_t even = round_up(bytes / (std::uint64_t{threads_} * 4), chunk_granule);
  return std::clamp(even, floor, chunk_);
}

bulk_read_stats bulk_reader::stats() const {
  const auto get = [](const std::atomic<std::uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  bulk_read_stats s;
  s.calls = get(counts_.calls);
  s.bytes = get(counts_.bytes);
  s.chunks = get(counts_.chunks);
  s.caller_chunks = get(counts_.caller_chunks);
  s.lanes = get(counts_.lanes);
  s.call_ns = get(counts_.call_ns);
  s.read_ns = get(counts_.read_ns);
  s.buffer_wait_ns = get(counts_.buffer_wait_ns);
  s.drain_ns = get(counts_.drain_ns);
  s.wake_ns = get(counts_.wake_ns);
  s.helpers = get(counts_.helpers);
  return s;
}

unsigned bulk_reader::live_helpers() {
  std::lock_guard<std::mutex> lock(mutex_);
  unsigned n = 0;
  for (const auto& l : lanes_) n += l->running;
  return n;
}

unsigned bulk_reader::lanes_holding_buffers() {
  std::lock_guard<std::mutex> lock(mutex_);
  unsigned n = 0;
  for (const auto& l : lanes_) n += (l->buffers[0] || l->buffers[1] || l->uploads) ? 1 : 0;
  return n;
}

std::vector<bulk_reader::lane*> bulk_reader::take_lanes(unsigned want,
                                                        const std::function<bool()>& interrupt) {
  std::vector<lane*> taken;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    while (taken.size() < want && !free_.empty()) {
      taken.push_back(free_.back());
      free_.pop_back();
    }
    while (taken.size() < want && lanes_.size() < threads_) {
      lanes_.push_back(std::make_unique<lane>());
      taken.push_back(lanes_.back().get());
    }
    for (lane* l : taken) l->taken = true;
    if (!taken.empty()) return taken;
    // Every thread is busy with other calls: wait for one, interruptibly.
    freed_.wait_for(lock, std::chrono::nanoseconds(poll_interval_ns));
    if (interrupt && free_.empty()) {
      lock.unlock();
      const bool stop = interrupt();
      lock.lock();
      if (stop) throw runtime_error("bulk read cancelled", cancelled_info({}, 0));
    }
  }
}

void bulk_reader::give_back(const std::vector<lane*>& lanes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (lane* l : lanes) l->taken = false;
    free_.insert(free_.end(), lanes.begin(), lanes.end());
  }
  freed_.notify_all();
}

void bulk_reader::start_helper(lane& l) {
  if (l.running) return;
  // A helper that left: its thread is past the lock and ending.
  if (l.thread.joinable()) l.thread.join();
  l.thread = std::thread([this, &l] { serve(l); });
  l.running = true;
  pthread_setname_np(l.thread.native_handle(), "warpstore-bulk");
}

void bulk_reader::hand_out(call& c, const std::vector<lane*>& lanes) {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    start_helper(*lanes[0]);
  } catch (...) {
    // Only its idle cleanup waits for it: the next call starts it again.
  }
  unsigned handed = 0;
  c.handed_at = steady_ns();
  try {
    for (std::size_t i = 1; i < lanes.size(); ++i) {
      start_helper(*lanes[i]);
      lanes[i]->job = &c;
      lanes[i]->wake.notify_one();
      ++handed;
    }
  } catch (...) {
    c.fail(std::current_exception());
  }
  // Before any helper can end: each needs mutex_ to see its job.
  std::lock_guard<std::mutex> call_lock(c.m);
  c.helpers = handed;
  counts_.helpers.fetch_add(handed, std::memory_order_relaxed);
}

void bulk_reader::serve(lane& l) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (l.job != nullptr) {
      call& c = *l.job;
      l.job = nullptr;
      lock.unlock();
      work(c, l, false);
      {
        // Notified under c.m: the caller cannot return (and destroy c)
        // before this thread lets go of it.
        std::lock_guard<std::mutex> call_lock(c.m);
        if (--c.helpers == 0) c.helpers_done.notify_all();
      }
      lock.lock();
      continue;
    }
    if (stopping_) break;
    const bool timed_out = l.wake.wait_for(lock, std::chrono::nanoseconds(linger_ns_)) ==
                           std::cv_status::timeout;
    if (timed_out && l.job == nullptr && !l.taken) break;
  }
  // Idle for linger_ns_ (or the reader is going): the lane gives up its
  // pinned memory and stream; a call that takes it later makes new ones.
  l.running = false;
  runtime::host_pinned_ptr<std::byte> buffers[2] = {std::move(l.buffers[0]),
                                                    std::move(l.buffers[1])};
  std::unique_ptr<runtime::upload_stream> uploads = std::move(l.uploads);
  lock.unlock();
  uploads.reset();
  buffers[0].reset();
  buffers[1].reset();
}

void bulk_reader::read(const backing_file& file, std::uint64_t offset, std::uint64_t bytes,
                       void* dst, std::uintptr_t stream, const std::function<bool()>& interrupt,
                       std::uint64_t max_chunk) {
  if (bytes == 0) return;
  if (offset > file.size_bytes() || bytes > file.size_bytes() - offset)
    throw invalid_argument("warpstore: bulk read of " + std::to_string(bytes) + " bytes at offset " +
                               std::to_string(offset) + " of '" + file.path() +
                               "' goes past its end (" + std::to_string(file.size_bytes()) +
                               " bytes)",
                           file.path(), offset);
  if (dst == nullptr) throw invalid_argument("warpstore: bulk read into a null pointer", file.path());

  call c;
  c.file = &file;
  c.offset = offset;
  c.end = offset + bytes;
  c.dst = static_cast<std::byte*>(dst);
  c.stream = stream;
  c.device = runtime::is_device_memory(dst);
  c.chunk = call_chunk_bytes(bytes);
  if (max_chunk != 0)
    c.chunk = std::clamp(round_down(max_chunk, chunk_granule), chunk_granule, c.chunk);
  c.first_chunk = offset / c.chunk;
  c.chunks = (c.end - 1) / c.chunk - c.first_chunk + 1;
  c.interrupt = interrupt ? &interrupt : nullptr;

  const std::uint64_t began = steady_ns();
  const auto want = static_cast<unsigned>(std::min<std::uint64_t>(c.chunks, threads_));
  const std::vector<lane*> lanes = take_lanes(want, interrupt);
  counts_.calls.fetch_add(1, std::memory_order_relaxed);
  counts_.bytes.fetch_add(bytes, std::memory_order_relaxed);
  counts_.lanes.fetch_add(lanes.size(), std::memory_order_relaxed);
  try {
    if (c.device) {
      // Every lane's stream on the caller's device, made here (helpers make
      // that device current from their stream).
      const int dev = runtime::current_device();
      for (lane* l : lanes)
        if (!l->uploads || l->uploads->device() != dev)
          l->uploads = std::make_unique<runtime::upload_stream>();
    }
  } catch (...) {
    c.fail(std::current_exception());
  }
  // A stream or a thread that could not be made: the helpers woken read
  // nothing more, and the error is raised once they stopped.
  if (!c.stop.load(std::memory_order_relaxed)) hand_out(c, lanes);
  if (!c.stop.load(std::memory_order_relaxed)) work(c, *lanes[0], true);
  {
    std::unique_lock<std::mutex> lock(c.m);
    c.helpers_done.wait(lock, [&] { return c.helpers == 0; });
  }
  give_back(lanes);
  counts_.call_ns.fetch_add(steady_ns() - began, std::memory_order_relaxed);

  std::lock_guard<std::mutex> lock(c.m);
  if (c.error) std::rethrow_exception(c.error);
  if (c.cancelled) throw runtime_error("bulk read of '" + file.path() + "' cancelled",
                                       cancelled_info(file.path(), offset));
}

void bulk_reader::copy_pinned(const std::byte* src, std::uint64_t bytes, void* dst,
                              std::uintptr_t stream, const std::function<bool()>& interrupt,
                              const std::string& path, std::uint64_t offset,
                              std::uint64_t piece_bytes) {
  if (bytes == 0) return;
  if (src == nullptr || dst == nullptr)
    throw invalid_argument("warpstore: bulk copy from or into a null pointer", path, offset);
  if (piece_bytes == 0) throw invalid_argument("warpstore: bulk copy in pieces of 0 bytes", path);
  const std::uint64_t began = steady_ns();
  auto* out = static_cast<std::byte*>(dst);
  // A stream of this call's own (a stream and three events: microseconds
  // beside a piece's millisecond), ordered after the caller's stream.
  runtime::upload_stream uploads;
  uploads.after(stream);
  const std::uint64_t pieces = (bytes + piece_bytes - 1) / piece_bytes;
  std::uint64_t sent = 0, polled = 0;
  bool cancelled = false;
  try {
    for (std::uint64_t k = 0; k < pieces; ++k) {
      if (k >= 2) uploads.wait_mark(static_cast<unsigned>(k));  // piece k - 2 is done
      if (interrupt && steady_ns() - polled >= poll_interval_ns) {
        polled = steady_ns();
        if (interrupt()) {
          cancelled = true;
          break;
        }
      }
      const std::uint64_t n = std::min(piece_bytes, bytes - sent);
      uploads.copy(out + sent, src + sent, n);
      uploads.mark(static_cast<unsigned>(k));
      sent += n;
    }
    uploads.synchronize();
  } catch (...) {
    try {
      uploads.synchronize();  // nothing may still read or write the caller's memory
    } catch (...) {
    }
    throw;
  }
  counts_.calls.fetch_add(1, std::memory_order_relaxed);
  counts_.bytes.fetch_add(sent, std::memory_order_relaxed);
  const std::uint64_t done = (sent + piece_bytes - 1) / piece_bytes;
  counts_.chunks.fetch_add(done, std::memory_order_relaxed);
  counts_.caller_chunks.fetch_add(done, std::memory_order_relaxed);
  counts_.call_ns.fetch_add(steady_ns() - began, std::memory_order_relaxed);
  if (cancelled)
    throw runtime_error("bulk read of '" + path + "' cancelled", cancelled_info(path, offset));
}

void bulk_reader::work(call& c, lane& l, bool caller) {
  const backing_file& file = *c.file;
  const std::uint64_t align = file.direct() ? file.direct_alignment() : 1;
  unsigned k = 0;  // chunks this thread sent through its buffers
  std::uint64_t polled = 0;  // the first poll comes before the first chunk
  // This thread's share of stats(), added once at its end.
  std::uint64_t chunks = 0, read_ns = 0, buffer_wait_ns = 0, drain_ns = 0;
  if (!caller)
    counts_.wake_ns.fetch_add(steady_ns() - c.handed_at, std::memory_order_relaxed);
  const auto timed = [](std::uint64_t& into, auto&& f) {
    const std::uint64_t t = steady_ns();
    f();
    into += steady_ns() - t;
  };
  try {
    if (c.device) {
      if (!caller) l.uploads->use_device();
      l.uploads->after(c.stream);  // the destination may still be in use there
    }
    for (;;) {
      if (caller && c.interrupt != nullptr && steady_ns() - polled >= poll_interval_ns) {
        polled = steady_ns();
        if ((*c.interrupt)()) {
          std::lock_guard<std::mutex> lock(c.m);
          c.cancelled = true;
          c.stop.store(true, std::memory_order_relaxed);
        }
      }
      if (c.stop.load(std::memory_order_relaxed)) break;
      const std::uint64_t i = c.next.fetch_add(1, std::memory_order_relaxed);
      if (i >= c.chunks) break;
      ++chunks;
      const std::uint64_t from = std::max(c.offset, (c.first_chunk + i) * c.chunk);
      const std::uint64_t to = std::min(c.end, (c.first_chunk + i + 1) * c.chunk);
      std::byte* out = c.dst + (from - c.offset);
      const bool aligned = from % align == 0 && to % align == 0 &&
                           reinterpret_cast<std::uintptr_t>(out) % align == 0;
      if (!c.device && aligned) {
        timed(read_ns, [&] { read_span(file, out, from, to - from, to - from); });
        continue;
      }
      // Through a buffer: the O_DIRECT window around [from, to) stays inside
      // the chunk, since chunk boundaries are aligned.
      const std::uint64_t lo = round_down(from, align), hi = round_up(to, align);
      std::byte* buf = l.buffer(k, chunk_);
      // The copy out of this buffer is done.
      if (c.device) timed(buffer_wait_ns, [&] { l.uploads->wait_mark(k); });
      timed(read_ns, [&] { read_span(file, buf, lo, hi - lo, to - lo); });
      if (c.device) {
        l.uploads->copy(out, buf + (from - lo), to - from);
        l.uploads->mark(k);
        ++k;
      } else {
        std::memcpy(out, buf + (from - lo), to - from);
      }
    }
    if (c.device) timed(drain_ns, [&] { l.uploads->synchronize(); });
  } catch (...) {
    c.fail(std::current_exception());
    // The buffers go back to the pool: no copy may still read them.
    if (c.device && l.uploads) {
      try {
        l.uploads->synchronize();
      } catch (...) {
        l.uploads.reset();  // a broken stream is not reused
      }
    }
  }
  counts_.chunks.fetch_add(chunks, std::memory_order_relaxed);
  if (caller) counts_.caller_chunks.fetch_add(chunks, std::memory_order_relaxed);
  counts_.read_ns.fetch_add(read_ns, std::memory_order_relaxed);
  counts_.buffer_wait_ns.fetch_add(buffer_wait_ns, std::memory_order_relaxed);
  counts_.drain_ns.fetch_add(drain_ns, std::memory_order_relaxed);
}

}  // namespace warpstore::host_detail

namespace warpstore {

bulk_read_stats bulk_read_totals() { return host_detail::bulk_reader::acquire()->stats(); }

}  // namespace warpstore
