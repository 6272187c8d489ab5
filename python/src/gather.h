// What the Python extension asks of a target: gather positions [0, n) of an
// index vector into an output buffer. Implemented once per target
// (gather_gpu.cu, gather_cpu.cpp) over the shared bodies of gather.cuh.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "warpstore/array.cuh"

namespace warpstore::python {

// What one gather call owns, in device memory: the first error its reads hit,
// the first position of the batch holding an out-of-range index, and the
// flag that cancels it. Calls on one array from several threads never see
// each other's errors.
struct call_record {
  error_record errors;
  std::uint64_t first_bad;    // no_bad_position when every index is in range
  std::uint32_t cancel;       // nonzero: positions not yet started are skipped
  std::uint32_t blocks_done;  // GPU target: blocks of the kernel that ended
  // GPU target, for a gather that may inform the next one's order
  // (erased_array::sorts): the cache's totals as the call ended. lookups:
  // hits, fills and reads around; misses: fills and reads around.
  std::uint64_t cache_lookups;
  std::uint64_t cache_misses;
};

// A call's pooled resources: its record on the device, a host copy of it
// (pinned on the GPU target) and, on the GPU target, the event the waiting
// thread polls and the stream that carries a cancel past the caller's.
//
// On the GPU target the kernel itself hands the record over: its last block
// copies it to `host` (mapped) and resets the device record for the next
// call. A gather is then one launch and one event on the caller's stream,
// with no memset before it and no copy after it (three stream operations,
// about a fifth of a 1 K-row gather's 50 us on the H200).
struct call_slot {
  call_record* device = nullptr;
  call_record* host = nullptr;
  void* event = nullptr;
  void* cancel_stream = nullptr;
  // A sorted gather's keys, positions and radix-sort scratch (device
  // memory, grown as needed, kept with the slot).
  void* sort_space = nullptr;
  std::size_t sort_bytes = 0;
};

// Called every few milliseconds by the thread that waits for a gather;
// returning true cancels the gather (Ctrl-C). Runs without the GIL held.
using interrupt_poll = std::function<bool()>;
// Asked by a waiting thread, with the nanoseconds it has waited, until it
// returns true once (see erased_array::finish).
using late_hook = std::function<bool(std::uint64_t waited_ns)>;

// Raised by gather when interrupt_poll asked it to stop. The array stays
// usable: the reads in flight finished, the rest were never started.
class cancelled : public runtime_error {
 public:
  cancelled() : runtime_error("gather cancelled", cancelled_info()) {}

 private:
  static error_info cancelled_info() {
    error_info i;
    i.kind = error_kind::cancelled;
    return i;
  }
};

// A storage-backed array whose element type is erased: `word_bytes` is the
// size of the words the cache serves (the dtype's size for 1-D arrays, the
// largest power of two up to 16 dividing the row for [N, D] arrays).
class erased_array {
 public:
  // `shared` (may be null: a cache of its own, sized by opts) is a cache
  // other arrays use too; its line size wins over opts.line_size.
  erased_array(const std::string& path, std::uint64_t rows, std::uint64_t row_bytes,
               std::uint32_t word_bytes, std::uint64_t byte_offset, const options& opts,
               std::shared_ptr<warpstore::cache> shared = nullptr);
  ~erased_array();
  erased_array(const erased_array&) = delete;
  erased_array& operator=(const erased_array&) = delete;

  std::uint64_t rows() const { return rows_; }
  std::uint64_t row_bytes() const { return row_bytes_; }
  std::uint32_t word_bytes() const { return word_bytes_; }
  // options::gather_sm_share: where a GPU gather runs (gather_gpu.cu).
  std::uint32_t gather_sm_share() const { return gather_sm_share_; }
  // Whether a gather of n positions should read its rows in file order
  // (options::gather_sort_rows): n is that large, the GPU reads the rows
  // from host memory (the memory controller), the array holds more than
  // options::gather_sort_bytes, n is at most sort_max_rows, and the
  // array's last large gather missed on at least one lookup in
  // sort_miss_share (or none ran).
  bool sorts(std::uint64_t n) const;
  // Whether a gather of n positions reports the cache's totals (its record's
  // cache_lookups, cache_misses) for the next one's sorts() and
  // admit_misses(): every gather of an array that may admit misses, the
  // large ones of one that may sort.
  bool samples_cache(std::uint64_t n) const {
    return admitting_ || (sortable_ && n >= sort_rows_);
  }
  // array_ref::admit_misses for the next gather: options::gather_miss_admit
  // while the cache's lookups since the last sample missed on 3 in 4 or
  // more (and until they miss on fewer than 1 in 2), else 0 (see
  // admitting_).
  std::uint32_t admit_misses() const {
    return admitting_ && admit_next_.load(std::memory_order_relaxed) ? miss_admit_ : 0;
  }
  // Gathers that read misses around the cache (Array.stats()["admitting_gathers"]).
  std::uint64_t admitting_gathers() const {
    return admitting_gathers_.load(std::memory_order_relaxed);
  }
  void count_admitting() const { admitting_gathers_.fetch_add(1, std::memory_order_relaxed); }
  static constexpr std::uint64_t sort_miss_share = 16;
  // The largest gather that sorts: its keys, positions and the sort's
  // scratch (about 24 bytes a position, about 100 MiB at this size) stay
  // with the call's slot while the array is open.
  static constexpr std::uint64_t sort_max_rows = std::uint64_t{1} << 22;
  // Gathers that went in row order (Array.stats()["sorted_gathers"]).
  std::uint64_t sorted_gathers() const { return sorted_gathers_.load(std::memory_order_relaxed); }
  void count_sorted() const { sorted_gathers_.fetch_add(1, std::memory_order_relaxed); }
  detail::array_base& base() const { return *base_; }

  // Gathers rows idx[0..n) (signed 32- or 64-bit, `index_bytes`) into `out`
  // (n * row_bytes). Both pointers are device memory on the GPU target, host
  // memory on the CPU target. `stream` orders the work on the GPU (a
  // cudaStream_t; 0 the default stream) and is waited for before return;
  // while waiting, `poll` (if set) is called every few milliseconds and may
  // cancel the call (then `cancelled` is raised). Returns the first position
  // whose index is out of range, or no_bad_position; raises io_error for a
  // failed read. Safe to call from several threads at once: each call has a
  // record of its own.
  std::uint64_t gather(const void* idx, std::uint32_t index_bytes, std::uint64_t n, void* out,
                       std::uintptr_t stream, const interrupt_poll& poll = {}) const;

  // gather in two halves, for callers that go on while the rows arrive:
  // start() queues the gather (on the GPU target it returns before the rows
  // are in; the service threads stay awake until its kernel ends), and finish()
  // waits for it and returns or raises what gather would. Every started
  // gather must be finished exactly once.
  struct started {
    call_slot slot;
    bool live = false;  // started and not yet finished
  };
  // announce_here: start announces the gather to the controller and a hook in
  // the stream ends it; false for a caller that holds the controller awake
  // itself (gather, with an activity_scope).
  started start(const void* idx, std::uint32_t index_bytes, std::uint64_t n, void* out,
                std::uintptr_t stream, const interrupt_poll& poll = {},
                bool announce_here = true) const;
  // late: asked while the wait goes on (with the nanoseconds waited) until
  // it returns true (gather: wakes the service threads once commands went
  // out or late_wait_ns passed, never for a gather that hits).
  std::uint64_t finish(started& s, const interrupt_poll& poll = {},
                       const late_hook& late = {}) const;
  bool done(const started& s) const;  // never blocks

 private:
  call_slot take_slot() const;
  void give_back(call_slot s) const;

  std::uint64_t rows_;
  std::uint64_t row_bytes_;
  std::uint32_t word_bytes_;
  std::uint32_t gather_sm_share_;
  std::unique_ptr<detail::array_base> base_;  // an array<word<word_bytes>>
  mutable std::mutex slots_mutex_;
  mutable std::vector<call_slot> free_slots_;  // one per call that ran at once, reused
  // The last sync gather sent commands: the next one wakes the service
  // threads with its launch rather than once its kernel rings a doorbell.
  mutable std::atomic<bool> sent_commands_{false};
  // sorts(): the cache's totals as the last sampled gather ended, and
  // whether it missed enough for the next large one to sort.
  void note_cache_totals(const call_record& rec) const;
  std::uint64_t sort_rows_ = 0;
  // Large gathers may sort: GPU target, memory controller (the GPU reads
  // the rows from host memory, where order matters), more than
  // gather_sort_bytes, gather_sort_rows set, gather_sm_share 0.
  bool sortable_ = false;
  // Gathers may admit misses (admit_misses): GPU target, memory controller,
  // read-only, rows of more than one word and less than a line,
  // gather_miss_admit above 1; never a sorted gather.
  bool admitting_ = false;
  std::uint32_t miss_admit_ = 0;
  mutable std::atomic<bool> admit_next_{false};
  mutable std::atomic<std::uint64_t> admitting_gathers_{0};
  mutable std::mutex totals_mutex_;
  mutable std::uint64_t seen_lookups_ = 0, seen_misses_ = 0;
  mutable std::atomic<bool> sort_next_{true};
  mutable std::atomic<std::uint64_t> sorted_gathers_{0};
};

// True when this target can run (a GPU is visible, or the CPU target).
bool target_available();
// Per target (gather_gpu.cu / gather_cpu.cpp): makes and frees a call's
// resources, and runs one gather with them, leaving its record in slot.host.
call_slot make_call_slot();
void destroy_call_slot(call_slot& s) noexcept;
// launch_gather starts one gather with a slot's resources: on the GPU
// target it is queued on `stream` and the slot's event marks its end, so it
// returns at once; the CPU target runs it whole (polling `poll`) before
// returning. wait_gather waits for the slot's gather (GPU: for the event,
// polling `poll` and asking `late`), after which
// slot.host holds its record.
//
// on_done(arg) runs once the gather's reads are over: on the GPU target from
// CUDA's host-function thread, in stream order right after the kernel (so
// the service threads can sleep while the caller still computes), on the
// CPU target before launch_gather returns. `queued` says whether it was
// handed over (if launch_gather throws before that, the caller runs it).
struct done_hook {
  void (*fn)(void*) = nullptr;
  void* arg = nullptr;
};
void launch_gather(const erased_array& a, const void* idx, std::uint32_t index_bytes,
                   std::uint64_t n, void* out, std::uintptr_t stream, call_slot& slot,
                   const interrupt_poll& poll, done_hook on_done, bool& queued);
// late_wait_ns: how long a sync gather that sent no command waits before
// it wakes the service threads anyway. A small all-hit gather is over well
// before (tens of microseconds in all).
constexpr std::uint64_t late_wait_ns = 100'000;
void wait_gather(const call_slot& slot, const interrupt_poll& poll, const late_hook& late = {});
// Whether the slot's gather has ended (never blocks).
bool gather_done(const call_slot& slot);

}  // namespace warpstore::python

namespace warpstore::python {
// The CUDA device arrays open on (the current one), or -1 on the CPU target.
int current_device();
}  // namespace warpstore::python

namespace warpstore::python {
// GPU build only: the benchmark's UVA path, rows idx[0..n) of pinned host
// memory `host_src` copied to device memory `out` by one warp per row.
void uva_gather(const void* host_src, std::uint64_t row_bytes, const std::int64_t* idx,
                std::uint64_t n, void* out, std::uintptr_t stream);
}  // namespace warpstore::python
