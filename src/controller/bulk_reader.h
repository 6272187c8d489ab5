// Bulk reads: a contiguous byte range of a backing file straight into a
// destination (GPU memory, or host memory), without the cache and the
// queues. The range is cut into large chunks at fixed file offsets; the
// calling thread and a few helper threads of this call take chunks in turn,
// so page-cache copies (a single thread's pread tops out at 5-10 GB/s) and
// device reads run in parallel. Destinations in GPU memory go through pinned
// bounce buffers, two a thread: the thread reads the next chunk into one
// while its own stream's copy engine empties the other. Host destinations
// are read into directly (through a bounce buffer only where O_DIRECT's
// alignment is not met: the head and tail of an unaligned range).
//
// Threads and buffers: the reader has up to `threads` lanes, each a pinned
// buffer pair, a copy stream and a helper thread. A call takes lanes (the
// threads of all calls together are capped: default three quarters of the
// process's cores (process_cores()), at most 16; a call that finds none
// free works alone or waits for one) and wakes their helpers; between calls a helper sleeps on a condition
// variable, and one idle for `linger` frees its lane's buffers and stream and
// ends. So back-to-back reads pay no thread start and no pinning, and an
// idle process holds neither threads nor pinned memory for long. The
// process's reader (acquire) lives until exit; a forked child makes its own.
//
// Lives in src/controller/ because it is file I/O against a backing_file,
// with the same error conventions as the host controller's reads; the
// array (src/array/array_base.cpp) decides when a bulk read is coherent with
// its cache. Private to the library.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "warpstore/controller.h"

namespace warpstore::host_detail {

class bulk_reader {
 public:
  // Chunks: large enough that a system call and a copy launch cost little
  // beside the bytes, small enough that a 64 MiB read still spreads over
  // every thread and the pinned buffers stay modest (two a thread).
  static constexpr std::uint64_t default_chunk_bytes = std::uint64_t{4} << 20;
  // Chunk sizes must be multiples of this (the largest O_DIRECT alignment a
  // backing file accepts), so every chunk boundary is aligned for O_DIRECT.
  static constexpr std::uint64_t chunk_granule = std::uint64_t{1} << 16;
  static constexpr std::uint64_t max_chunk_bytes = std::uint64_t{1} << 30;
  static constexpr unsigned max_threads = 16;
  // How often (at most) the calling thread asks its interrupt poll.
  static constexpr std::uint64_t poll_interval_ns = 10'000'000;

  // A call's chunks: at most chunk_bytes, and smaller for a range of fewer
  // than about four chunks a thread, so a 64 MiB read still keeps every
  // thread busy to the end (at least min_call_chunk_bytes, or chunk_bytes
  // where that is smaller).
  static constexpr std::uint64_t min_call_chunk_bytes = std::uint64_t{1} << 18;
  static constexpr std::uint64_t default_linger_ns = 10'000'000'000;

  struct config {
    std::uint64_t chunk_bytes = default_chunk_bytes;
    unsigned threads = 0;  // threads of all calls together, the callers included; 0: default
    std::uint64_t linger_ns = default_linger_ns;  // how long an idle helper keeps its lane
  };
  // Three quarters of the process's cores (process_cores()), 1 to max_threads.
  static unsigned default_threads();

  // The process's reader (default config): made at the first call in a
  // process, then the same until exit.
  static std::shared_ptr<bulk_reader> acquire();

  // Raises invalid_argument for a chunk size that is not a multiple of
  // chunk_granule (up to max_chunk_bytes) or more than max_threads threads.
  bulk_reader();  // the default config
  explicit bulk_reader(config c);
  ~bulk_reader();
  bulk_reader(const bulk_reader&) = delete;
  bulk_reader& operator=(const bulk_reader&) = delete;

  std::uint64_t chunk_bytes() const { return chunk_; }
  // What this reader's calls did so far (warpstore::bulk_read_stats).
  bulk_read_stats stats() const;
  unsigned threads() const { return threads_; }
  // The chunk size of a call reading `bytes`.
  std::uint64_t call_chunk_bytes(std::uint64_t bytes) const;
  // Helper threads alive now (woken or sleeping), and lanes holding pinned
  // buffers or a copy stream: both fall to 0 once the reader idled `linger`.
  unsigned live_helpers();
  unsigned lanes_holding_buffers();

  // Reads `bytes` at byte `offset` of `file` into `dst` and returns once
  // they are there. `dst` is GPU memory (device or managed: the copies wait
  // for the work queued so far on `stream`, a cudaStream_t, 0 the default
  // stream) or host memory. `interrupt`, if set, is called by the calling
  // thread every poll_interval_ns or so; true stops the read (the chunks in
  // flight finish) and raises runtime_error of kind cancelled. Raises
  // invalid_argument for a range past the end of the file, file_error (with
  // the path and the offset) for a failed read or one that ends early (the
  // file shrank). Any number of threads may call at once.
  // `max_chunk` (0: the reader's chunk size) caps this call's chunks.
  void read(const backing_file& file, std::uint64_t offset, std::uint64_t bytes, void* dst,
            std::uintptr_t stream = 0, const std::function<bool()>& interrupt = {},
            std::uint64_t max_chunk = 0);

  // The same contract as read() for bytes a controller already holds in
  // pinned host memory (`src`: the memory controller's mapping of the
  // file's page cache, controller::mapped_file()): no pread and no helper
  // thread, only the copy engine. `dst` is GPU memory (the GPU target) or
  // host memory (a memcpy, as on the CPU target). The copies go in pieces
  // of pinned_piece_bytes, two in flight, so the interrupt is asked between
  // pieces (a piece is about a millisecond over PCIe); an interrupted copy
  // raises runtime_error of kind cancelled once the pieces in flight are
  // done. `path` and `offset` (the file offset of src) go into errors.
  // Counted in stats() as a call of pieces the caller read itself.
  void copy_pinned(const std::byte* src, std::uint64_t bytes, void* dst, std::uintptr_t stream,
                   const std::function<bool()>& interrupt, const std::string& path,
                   std::uint64_t offset, std::uint64_t piece_bytes = pinned_piece_bytes);
  static constexpr std::uint64_t pinned_piece_bytes = std::uint64_t{64} << 20;

 private:
  struct lane;
  struct call;
  // Takes up to `want` lanes (at least one, waiting for it while polling
  // `interrupt`); gives them back.
  std::vector<lane*> take_lanes(unsigned want, const std::function<bool()>& interrupt);
  void give_back(const std::vector<lane*>& lanes);
  // Hands lanes[1...] to their helpers (starting those not running) and
  // makes sure lanes[0]'s helper runs, to free its buffers once idle. A
  // thread that cannot start fails the call (c.fail); the helpers handed
  // the call are counted in c.helpers.
  void hand_out(call& c, const std::vector<lane*>& lanes);
  void start_helper(lane& l);  // under mutex_
  void serve(lane& l);         // a helper thread
  void work(call& c, lane& l, bool caller);

  std::uint64_t chunk_;
  unsigned threads_;
  std::uint64_t linger_ns_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<lane>> lanes_;  // made on demand, up to threads_
  std::vector<lane*> free_;                   // under mutex_
  bool stopping_ = false;                     // under mutex_: the destructor runs
  // stats(): each thread adds its share once a call.
  struct counters {
    std::atomic<std::uint64_t> calls{0}, bytes{0}, chunks{0}, caller_chunks{0}, lanes{0},
        call_ns{0}, read_ns{0}, buffer_wait_ns{0}, drain_ns{0}, wake_ns{0}, helpers{0};
  };
  counters counts_;
};

}  // namespace warpstore::host_detail
