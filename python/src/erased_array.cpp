#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "gather.cuh"
#include "gather.h"
#include "warpstore/runtime.h"

namespace warpstore::python {

namespace {
// Ends the controller activity a gather began, once its reads are over.
void end_activity(void* c) { static_cast<controller*>(c)->end_activity(); }
}  // namespace

erased_array::erased_array(const std::string& path, std::uint64_t rows, std::uint64_t row_bytes,
                           std::uint32_t word_bytes, std::uint64_t byte_offset,
                           const options& given, std::shared_ptr<warpstore::cache> shared)
    : rows_(rows),
      row_bytes_(row_bytes),
      word_bytes_(word_bytes),
      gather_sm_share_(given.gather_sm_share),
      sort_rows_(given.gather_sort_rows),
      miss_admit_(given.gather_miss_admit) {
  options opts = given;
  if (shared) {
    opts.cache_bytes = shared->bytes();
    opts.line_size = shared->line_size();
  }
  if (rows == 0 || row_bytes == 0)
    throw warpstore::invalid_argument(path + ": the array is empty", path);
  if (word_bytes == 0 || word_bytes > 16 || (word_bytes & (word_bytes - 1)) != 0 ||
      row_bytes % word_bytes != 0)
    throw warpstore::invalid_argument(path + ": word size " + std::to_string(word_bytes) +
                                          " must be a power of two up to 16 dividing the row of " +
                                          std::to_string(row_bytes) + " bytes",
                                      path);
  opts.validate();
  const std::uint64_t words = rows * (row_bytes / word_bytes);
  base_ = with_word(word_bytes, [&]<class W>() -> std::unique_ptr<detail::array_base> {
    if (shared)
      return std::make_unique<array<W>>(shared, make_controller(path, opts), words, byte_offset,
                                        opts);
    return std::make_unique<array<W>>(path, words, opts, byte_offset);
  });
  // The GPU reads the rows' misses from host memory (the memory controller).
  const bool host_memory = runtime::gpu_build() &&
                           std::string_view(base_->shared_controller()->name()) == "memory";
  sortable_ = host_memory && sort_rows_ != 0 && gather_sm_share_ == 0 &&
              rows * row_bytes > given.gather_sort_bytes;
  // Rows smaller than a line only, where a miss would read more than the
  // row; not 1-D gathers (with admission they hung an interrupt test once:
  // H100, 2026-11-27, not understood; BENCHMARKS.md).
  admitting_ = host_memory && miss_admit_ > 1 && !opts.writable && row_bytes / word_bytes > 1 &&
               row_bytes < opts.line_size;
}

bool erased_array::sorts(std::uint64_t n) const {
  return sortable_ && n >= sort_rows_ && n <= sort_max_rows &&
         sort_next_.load(std::memory_order_relaxed);
}

// What the cache did between the last sampled gather and this one (other
// arrays of a shared cache and calls from other threads included: a rough
// but current measure of how much the large gathers miss).
void erased_array::note_cache_totals(const call_record& rec) const {
  std::lock_guard<std::mutex> lock(totals_mutex_);
  if (rec.cache_lookups < seen_lookups_ || rec.cache_misses < seen_misses_) {
    // The counters were reset (reset_stats, clear_cache: what they hold
    // is what came since), or an older call finished late (its totals are
    // still a fair share).
    seen_lookups_ = 0;
    seen_misses_ = 0;
  }
  if (rec.cache_lookups == seen_lookups_) return;
  const std::uint64_t lookups = rec.cache_lookups - seen_lookups_;
  const std::uint64_t misses = rec.cache_misses - seen_misses_;
  seen_lookups_ = rec.cache_lookups;
  seen_misses_ = rec.cache_misses;
  sort_next_.store(misses * sort_miss_share >= lookups, std::memory_order_relaxed);
  // Admission on at 3 misses in 4, off under 1 in 2: a cache that the
  // admitted lines fill (a working set that fits) turns it off.
  const bool admitting = admit_next_.load(std::memory_order_relaxed);
  admit_next_.store(admitting ? 2 * misses >= lookups : 4 * misses >= 3 * lookups,
                    std::memory_order_relaxed);
}

erased_array::~erased_array() {
  for (call_slot& s : free_slots_) destroy_call_slot(s);
}

call_slot erased_array::take_slot() const {
  {
    std::lock_guard<std::mutex> lock(slots_mutex_);
    if (!free_slots_.empty()) {
      call_slot s = free_slots_.back();
      free_slots_.pop_back();
      return s;
    }
  }
  return make_call_slot();
}

void erased_array::give_back(call_slot s) const {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  free_slots_.push_back(s);
}

std::uint64_t erased_array::gather(const void* idx, std::uint32_t index_bytes, std::uint64_t n,
                                   void* out, std::uintptr_t stream,
                                   const interrupt_poll& poll) const {
  // The caller waits at once: it holds the controller awake for the call
  // itself rather than queue a host callback that ends the activity (one
  // in the stream costs a small gather tens of microseconds: the driver's
  // thread runs it, and the event waits for it). On the GPU target only
  // once the kernel sent commands (the controller's submission mark moved)
  // or late_wait_ns passed: a gather that hits ends without the service
  // threads, and waking them (each then polls a while) would cost it more
  // than it takes. The CPU target gathers in launch_gather: awake at once.
  std::optional<activity_scope> awake;
  controller& ctl = *base_->shared_controller();
  if (n != 0 && !runtime::gpu_build()) awake.emplace(ctl);
  const bool lazy = n != 0 && runtime::gpu_build() && ctl.announces_activity();
  const std::uint64_t mark = lazy ? ctl.submission_mark() : 0;
  // Gathers that miss come in runs (a cache too small for the working
  // set): after one that sent commands, wake the threads with the launch,
  // so their wake-up overlaps the kernel's start.
  if (lazy && sent_commands_.load(std::memory_order_relaxed)) awake.emplace(ctl);
  started s = start(idx, index_bytes, n, out, stream, poll, /*announce_here=*/false);
  if (!lazy) return finish(s, poll);
  const std::uint64_t first_bad =
      awake ? finish(s, poll) : finish(s, poll, [&](std::uint64_t waited_ns) {
        if (waited_ns < late_wait_ns && ctl.submission_mark() == mark) return false;
        awake.emplace(ctl);
        return true;
      });
  sent_commands_.store(ctl.submission_mark() != mark, std::memory_order_relaxed);
  return first_bad;
}

erased_array::started erased_array::start(const void* idx, std::uint32_t index_bytes,
                                          std::uint64_t n, void* out, std::uintptr_t stream,
                                          const interrupt_poll& poll, bool announce_here) const {
  if (index_bytes != 4 && index_bytes != 8)
    throw warpstore::invalid_argument("indices must be 32- or 64-bit integers");
  started s;
  if (n == 0) return s;
  // The service threads poll at full speed while the gather's reads run,
  // and sleep as soon as they are over (the done hook ends the activity).
  // A controller without them (memory) needs no hook.
  controller& ctl = *base_->shared_controller();
  const bool announce = announce_here && ctl.announces_activity();
  if (announce) ctl.begin_activity();
  bool queued = false;
  try {
    s.slot = take_slot();
    s.live = true;
    launch_gather(*this, idx, index_bytes, n, out, stream, s.slot, poll,
                  announce ? done_hook{&end_activity, &ctl} : done_hook{}, queued);
  } catch (...) {
    // The slot's record may be in any state; a fresh one serves the next call.
    if (s.live) destroy_call_slot(s.slot);
    s.live = false;
    if (!queued && announce) ctl.end_activity();
    throw;
  }
  return s;
}

bool erased_array::done(const started& s) const { return !s.live || gather_done(s.slot); }

std::uint64_t erased_array::finish(started& s, const interrupt_poll& poll,
                                   const late_hook& late) const {
  if (!s.live) return no_bad_position;
  s.live = false;
  call_record rec{};
  try {
    wait_gather(s.slot, poll, late);
    rec = *s.slot.host;
  } catch (...) {
    destroy_call_slot(s.slot);
    throw;
  }
  give_back(s.slot);
  if (rec.cache_lookups != 0) note_cache_totals(rec);
  base_->shared_controller()->check();
  if (rec.cancel != 0) throw cancelled();
  // A bad index is the caller's error and is what gets reported; the reads
  // the batch did not make cannot have failed, those it made are dropped.
  if (rec.first_bad != no_bad_position) return rec.first_bad;
  if (rec.errors.count != 0) raise_recorded(rec.errors, base_->path());
  return no_bad_position;
}

}  // namespace warpstore::python
