// The Array binding, shared by both targets' modules: warpstore.Array (an
// open row array: gather, gather_raw, gather_async, read, stats,
// clear_cache, close), Cache (one cache several arrays share) and
// PendingGather (what gather_async returns), with the gates that let
// close() and clear_cache() wait for the calls in flight.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding.h"
#include "gather.cuh"
#include "gather.h"
#include "warpstore/runtime.h"

namespace nb = nanobind;

namespace warpstore::python {

namespace {

// A cache's counters as Array.stats() and Cache.stats() report them.
nb::dict cache_counters_dict(const cache_stats& s) {
  nb::dict d;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["evictions"] = s.evictions;
  d["bytes"] = s.bytes_read;
  d["retries"] = s.retries;
  d["overlapped_evictions"] = s.overlapped_evictions;
  d["read_around"] = s.read_around;
  d["errors"] = s.errors;
  d["hit_rate"] = s.hit_rate();
  return d;
}

// Admits calls on an array and lets close() and clear_cache() wait for the
// calls in flight: any number of shared calls, or one exclusive. A waiting
// exclusive call holds new shared ones back, so a stream of gathers from
// other threads cannot starve close(). Waits without the GIL.
class call_gate {
 public:
  void enter_shared() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return !exclusive_ && exclusive_waiting_ == 0; });
    ++shared_;
  }
  void leave_shared() {
    std::lock_guard<std::mutex> lock(m_);
    if (--shared_ == 0) cv_.notify_all();
  }
  void enter_exclusive() {
    std::unique_lock<std::mutex> lock(m_);
    ++exclusive_waiting_;
    cv_.wait(lock, [&] { return !exclusive_ && shared_ == 0; });
    --exclusive_waiting_;
    exclusive_ = true;
  }
  void leave_exclusive() {
    std::lock_guard<std::mutex> lock(m_);
    exclusive_ = false;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  unsigned shared_ = 0;
  unsigned exclusive_waiting_ = 0;
  bool exclusive_ = false;
};

template <bool Exclusive>
class gate_pass {
 public:
  explicit gate_pass(call_gate& g) : g_(g) {
    if constexpr (Exclusive) g_.enter_exclusive(); else g_.enter_shared();
  }
  ~gate_pass() {
    if constexpr (Exclusive) g_.leave_exclusive(); else g_.leave_shared();
  }
  gate_pass(const gate_pass&) = delete;
  gate_pass& operator=(const gate_pass&) = delete;

 private:
  call_gate& g_;
};

// A gather started by gather_async: owned jointly by the Python handle
// (py_pending) and by its array, which finishes it at close() or
// clear_cache() if nobody waited. Finished exactly once, under m. It holds
// no share of the array's gate: close() and clear_cache() take the gate
// (so no new one starts) and then finish every one still listed.
struct pending_call {
  std::mutex m;
  erased_array::started call;
  bool finished = false;
  bool orphaned = false;   // the handle is gone: an error goes to the array's next call
  bool reported = false;   // its error was raised
  std::uint64_t first_bad = no_bad_position;
  std::exception_ptr error;
};

class py_array;

// A cache several arrays share (warpstore.Cache). Every call of every array
// on it holds a share of its gate; clear() and retiring a closed array's
// lines take the gate alone, so no kernel of any of those arrays runs then.
struct shared_cache {
  shared_cache(std::uint64_t bytes, std::uint32_t line_size, std::uint32_t ways)
      : device(current_device()),
        lines(std::make_shared<warpstore::cache>(bytes, line_size, ways)) {}
  int device;
  std::shared_ptr<warpstore::cache> lines;
  call_gate gate;
  std::mutex m;
  std::vector<py_array*> arrays;           // open arrays on it, under m
  std::vector<std::uint32_t> to_retire;    // source ids of arrays freed unclosed, under m

  // Under the gate, held alone: retires what arrays freed without close()
  // left behind.
  void retire_leftovers() {
    std::vector<std::uint32_t> ids;
    {
      std::lock_guard<std::mutex> lock(m);
      ids.swap(to_retire);
    }
    for (std::uint32_t id : ids) lines->retire_source(id);
  }
};

// A share of a shared cache's gate for one call (nothing for a cache of the
// array's own).
class cache_share {
 public:
  explicit cache_share(shared_cache* c) : c_(c) {
    if (c_ != nullptr) c_->gate.enter_shared();
  }
  ~cache_share() {
    if (c_ != nullptr) c_->gate.leave_shared();
  }
  cache_share(const cache_share&) = delete;
  cache_share& operator=(const cache_share&) = delete;

 private:
  shared_cache* c_;
};

// An open array as Python sees it. Gathers from several threads run at
// once; close() and clear_cache() wait for the calls in flight, and calls
// after close() raise ValueError. Nothing a call uses is freed under it.
class py_array {
 public:
  py_array(const std::string& path, std::uint64_t rows, std::uint64_t row_bytes,
           std::uint32_t word_bytes, std::uint64_t offset, const options& opts,
           std::shared_ptr<shared_cache> shared)
      : path_(path),
        rows_(rows),
        row_bytes_(row_bytes),
        word_bytes_(word_bytes),
        offset_(offset),
        opts_(opts),
        device_(current_device()),
        shared_(std::move(shared)) {
    if (shared_ && shared_->device != device_)
      throw warpstore::invalid_argument(path + ": the cache is on cuda:" +
                                            std::to_string(shared_->device) +
                                            ", the current device is cuda:" +
                                            std::to_string(device_),
                                        path);
    if (shared_) {
      // Ids of arrays freed without close() go back before this one takes one.
      nb::gil_scoped_release release;
      bool leftovers;
      {
        std::lock_guard<std::mutex> lock(shared_->m);
        leftovers = !shared_->to_retire.empty();
      }
      if (leftovers) {
        gate_pass<true> pass(shared_->gate);
        shared_->retire_leftovers();
      }
    }
    a_ = std::make_unique<erased_array>(path, rows, row_bytes, word_bytes, offset, opts,
                                        shared_ ? shared_->lines : nullptr);
    if (shared_) {
      std::lock_guard<std::mutex> lock(shared_->m);
      shared_->arrays.push_back(this);
    }
  }
  // Freed without close() (the gates are not taken here: the GIL is held):
  // a shared cache retires its lines at its next clear() or close().
  ~py_array() {
    if (!shared_ || !a_) return;
    std::lock_guard<std::mutex> lock(shared_->m);
    std::erase(shared_->arrays, this);
    shared_->to_retire.push_back(a_->base().source_id());
  }
  py_array(const py_array&) = delete;
  py_array& operator=(const py_array&) = delete;

  void close() {
    nb::gil_scoped_release release;  // stopping the controller's threads takes a while
    gate_pass<true> pass(gate_);
    settle_pending(true);
    if (shared_ && a_) {
      // The array's lines leave the shared cache with it, while no other
      // array on the cache runs a kernel.
      gate_pass<true> cache_pass(shared_->gate);
      {
        std::lock_guard<std::mutex> lock(shared_->m);
        std::erase(shared_->arrays, this);
      }
      const std::uint32_t id = a_->base().source_id();
      a_.reset();
      closed_.store(true);
      shared_->lines->retire_source(id);
      shared_->retire_leftovers();
    }
    a_.reset();
    closed_.store(true);
  }
  bool closed() const { return closed_.load(); }
  int device() const { return device_; }

  // One call of the array: f(the open array) with the GIL released, earlier
  // gathers settled, and a share of the array's gate (and of a shared
  // cache's), so close() waits for it. A Ctrl-C caught by `poll` wins over
  // f's result or error.
  template <class F>
  void call(signal_poll& poll, F&& f) {
    try {
      nb::gil_scoped_release release;
      if (reopen_.load()) reopen();
      settle_pending(false);
      gate_pass<false> pass(gate_);
      cache_share share(shared_.get());
      try {
        f(open_array());
      } catch (...) {
        note_failure(std::current_exception());
        throw;
      }
    } catch (...) {
      if (!poll.raised) throw;
    }
    if (poll.raised) throw std::move(*poll.raised);
  }

  // An error that leaves the controller unusable: a wait that passed its
  // deadline fails its queue pair for good (the controller may still write
  // the slot it gave up on), and every later command on that pair fails at
  // once with "abort requested" (include/warpstore/queue.cuh). The array
  // then reopens its file at its next call (reopen()), rather than failing
  // a share of its calls from then on.
  void note_failure(const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const warpstore::error& err) {
      const nvme::status st = err.status();
      if (err.kind() == error_kind::deadline ||
          (err.kind() == error_kind::io && st.type() == nvme::status_type::generic &&
           st.code() == nvme::sc::abort_requested))
        reopen_.store(true);
    } catch (...) {
    }
  }

  // A new controller and cache for the same file and settings, once no
  // call is in flight (the gate alone; unwaited gathers finished first):
  // the old controller stops (its drain is bounded), its lines leave a
  // shared cache, and the cache starts cold. stats()["reopens"] counts
  // them. A reopen that fails (the file gone, shrunk, no memory) leaves the
  // array closed, as close() does, and raises why; later calls say it.
  void reopen() {
    gate_pass<true> pass(gate_);
    if (!reopen_.load() || closed_.load()) return;  // another call reopened it, or it closed
    settle_pending(true);
    std::optional<gate_pass<true>> cache_pass;
    if (shared_) cache_pass.emplace(shared_->gate);
    const std::uint32_t id = a_->base().source_id();
    a_.reset();  // the old cache's memory goes before the new one is made
    if (shared_) shared_->lines->retire_source(id);
    try {
      a_ = std::make_unique<erased_array>(path_, rows_, row_bytes_, word_bytes_, offset_, opts_,
                                          shared_ ? shared_->lines : nullptr);
    } catch (const std::exception& e) {
      if (shared_) {
        std::lock_guard<std::mutex> lock(shared_->m);
        std::erase(shared_->arrays, this);
      }
      closed_why_ = std::string(": it could not reopen after a deadline failed its controller (") +
                    e.what() + ")";
      closed_.store(true);
      reopen_.store(false);
      throw;
    }
    reopen_.store(false);
    reopens_.fetch_add(1);
  }

  // Gathers rows idx into out; returns the first position holding an
  // out-of-range index, or -1.
  std::int64_t gather(nb::ndarray<nb::ro, nb::c_contig> idx, nb::ndarray<nb::c_contig> out,
                      std::uintptr_t stream) {
    const std::uint32_t index_bytes = check_indices(idx, out);
    return gather_at(idx.data(), index_bytes, idx.shape(0), place_of(idx), out.data(),
                     out.nbytes(), stream);
  }

  // The same from addresses: n indices of index_bytes each at idx and
  // out_bytes of output at out, both in host memory (device -1) or on CUDA
  // device `device`. For the torch wrapper, which made the output and
  // checked both tensors: a small gather spends no time on DLPack capsules.
  std::int64_t gather_raw(std::uintptr_t idx, std::uint32_t index_bytes, std::uint64_t n,
                          std::int32_t device, std::uintptr_t out, std::uint64_t out_bytes,
                          std::uintptr_t stream) {
    if (index_bytes != 4 && index_bytes != 8)
      throw nb::type_error("indices must be int32 or int64");
    if (n != 0 && (idx == 0 || out == 0))
      throw warpstore::invalid_argument("gather_raw: a null address for " + std::to_string(n) +
                                        " indices");
    if (device < -1) throw warpstore::invalid_argument("gather_raw: device must be -1 or a CUDA device");
    return gather_at(reinterpret_cast<const void*>(idx), index_bytes, n, device,
                     reinterpret_cast<void*>(out), out_bytes, stream);
  }

  // Bulk read: the array's bytes [first_byte, first_byte + out's size)
  // into out, in large chunks on several threads, without the cache
  // (detail::array_base::read_range). out is host memory, or (GPU target)
  // memory on the array's device, written after the work queued so far on
  // `stream`; the bytes are in when this returns. Ctrl-C stops it.
  void read(std::uint64_t first_byte, nb::ndarray<nb::c_contig> out, std::uintptr_t stream) {
    signal_poll poll;
    call(poll, [&](const erased_array& a) {
      const bool host = on_host(out);
      if (!host && !runtime::gpu_build())
        throw warpstore::invalid_argument(
            "this is the CPU target: the output must be host memory (a NumPy array or a CPU "
            "tensor)");
      if (!host && (out.device_type() != nb::device::cuda::value || out.device_id() != device_))
        throw warpstore::invalid_argument("the output must be host memory or on the array's "
                                          "device (cuda:" + std::to_string(device_) + ")");
      a.base().read_range(first_byte, out.nbytes(), out.data(), host ? 0 : stream,
                          std::ref(poll));
    });
  }

  // Starts gathering rows idx (CUDA memory, on this array's device) into
  // out on `stream` and returns at once; the handle's wait() ends it. On
  // the CPU target the gather runs whole before this returns.
  std::shared_ptr<pending_call> gather_async(nb::ndarray<nb::ro, nb::c_contig> idx,
                                             nb::ndarray<nb::c_contig> out, std::uintptr_t stream) {
    const std::uint32_t index_bytes = check_indices(idx, out);
    const std::uint64_t n = idx.shape(0);
    if (runtime::gpu_build() && (idx.device_type() != nb::device::cuda::value ||
                                 idx.device_id() != device_))
      throw warpstore::invalid_argument("gather_async takes indices on the array's device (cuda:" +
                                        std::to_string(device_) + ")");
    if (!runtime::gpu_build() && !on_host(idx))
      throw warpstore::invalid_argument("this is the CPU target: indices must be CPU tensors");
    auto p = std::make_shared<pending_call>();
    signal_poll poll;
    call(poll, [&](const erased_array& a) {
      check_output(a, out, n);
      p->call = a.start(idx.data(), index_bytes, n, out.data(), stream, std::ref(poll));
      std::lock_guard<std::mutex> lock(pending_m_);
      pending_.push_back(p);
    });
    return p;
  }

  // Ends a gather_async call (waiting for it, interruptibly with `poll`);
  // keeps its result or error in p. Idempotent.
  void finish(pending_call& p, const interrupt_poll& poll) {
    std::lock_guard<std::mutex> lock(p.m);
    if (p.finished) return;
    try {
      p.first_bad = a_->finish(p.call, poll);  // a_ lives: close() and reopen() finish p first
    } catch (...) {
      p.error = std::current_exception();
      note_failure(p.error);
    }
    p.finished = true;
    std::lock_guard<std::mutex> plock(pending_m_);
    std::erase_if(pending_, [&](const auto& q) { return q.get() == &p; });
  }
  bool done(pending_call& p) {
    std::lock_guard<std::mutex> lock(p.m);
    return p.finished || a_->done(p.call);
  }

  nb::dict stats() {
    cache_stats s{};
    controller_stats c{};
    std::string controller;
    bool mapped = false;
    bool direct = false;
    double resident = -1;
    std::uint64_t cache_bytes = 0;
    std::uint32_t line_size = 0;
    std::uint64_t sorted = 0, admitting = 0;
    {
      nb::gil_scoped_release release;
      gate_pass<false> pass(gate_);
      cache_share share(shared_.get());
      const erased_array& a = open_array();
      s = a.base().stats();
      c = a.base().shared_controller()->stats();
      controller = a.base().shared_controller()->name();
      mapped = a.base().shared_controller()->maps_file();
      direct = a.base().shared_controller()->file().direct();
      resident = a.base().shared_controller()->file().resident_share();
      cache_bytes = a.base().cache().bytes();
      line_size = a.base().cache().line_size();
      sorted = a.sorted_gathers();
      admitting = a.admitting_gathers();
    }
    nb::dict d = cache_counters_dict(s);
    d["commands"] = c.commands;
    // Host controller, O_DIRECT: extents read ahead, and the misses they served.
    d["read_ahead_loads"] = c.read_ahead_loads;
    d["read_ahead_lines"] = c.read_ahead_lines;
    d["read_ahead_trigger"] = c.read_ahead_trigger;
    d["controller"] = controller;
    // The memory controller reads the file's own page-cache pages, pinned.
    d["mapped"] = mapped;
    // Whether the host controller reads with O_DIRECT, and (direct="auto")
    // the share of sampled pages that were in the page cache at open.
    d["direct"] = direct;
    d["resident_share"] = resident;
    d["cache_bytes"] = cache_bytes;
    d["line_size"] = line_size;
    // GPU gathers that read their rows in file order (options::gather_sort_rows).
    d["sorted_gathers"] = sorted;
    // GPU gathers that filled one missed line in gather_miss_admit and read
    // the other misses around the cache (counted in read_around).
    d["admitting_gathers"] = admitting;
    // Times the array reopened its file after an error that left its
    // controller failed (a deadline).
    d["reopens"] = reopens_.load();
    return d;
  }
  void reset_stats() {
    nb::gil_scoped_release release;
    gate_pass<false> pass(gate_);
    cache_share share(shared_.get());
    open_array().base().cache().reset_stats();
  }
  // Drops every cached line (and the controller's read-ahead extents): the
  // next gather starts cold and reads the file as it is now. The cache is
  // reset as a whole, so it waits for the gathers in flight (on a shared
  // cache, those of every array on it).
  void clear_cache() {
    nb::gil_scoped_release release;
    if (shared_) {
      gate_pass<false> pass(gate_);  // the array stays open
      open_array();
      clear_shared(*shared_);
      return;
    }
    gate_pass<true> pass(gate_);
    settle_pending(true);
    open_array().base().cache().clear();
    open_array().base().shared_controller()->forget_file_bytes();
  }
  // Clears a shared cache: its gate alone, then every array's unwaited
  // gathers finished, then the lines dropped. Without the GIL.
  static void clear_shared(shared_cache& c) {
    gate_pass<true> pass(c.gate);
    {
      // Under m: an array freed meanwhile (its destructor takes m) is never
      // touched after it is gone. Settling takes neither m nor the GIL.
      std::lock_guard<std::mutex> lock(c.m);
      for (py_array* a : c.arrays) a->settle_pending(true);
    }
    c.retire_leftovers();
    c.lines->clear();
    std::lock_guard<std::mutex> lock(c.m);
    for (py_array* a : c.arrays)
      if (a->a_) a->a_->base().shared_controller()->forget_file_bytes();
  }

 private:
  static std::uint32_t check_indices(const nb::ndarray<nb::ro, nb::c_contig>& idx,
                                     const nb::ndarray<nb::c_contig>& out) {
    if (idx.ndim() != 1) throw warpstore::invalid_argument("indices must be one-dimensional");
    const nb::dlpack::dtype t = idx.dtype();
    if (t.code != static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int) ||
        (t.bits != 32 && t.bits != 64) || t.lanes != 1)
      throw nb::type_error("indices must be int32 or int64");
    if (idx.device_type() != out.device_type() || idx.device_id() != out.device_id())
      throw warpstore::invalid_argument("indices and output must be on the same device");
    return t.bits / 8;
  }
  static void check_output(const erased_array& a, const nb::ndarray<nb::c_contig>& out,
                           std::uint64_t n) {
    check_output(a, out.data(), out.nbytes(), n);
  }
  static void check_output(const erased_array& a, const void* out, std::uint64_t out_bytes,
                           std::uint64_t n) {
    if (out_bytes != n * a.row_bytes())
      throw warpstore::invalid_argument("output holds " + std::to_string(out_bytes) +
                                        " bytes, the gather needs " +
                                        std::to_string(n * a.row_bytes()));
    if (reinterpret_cast<std::uintptr_t>(out) % a.word_bytes() != 0)
      throw warpstore::invalid_argument("output is not aligned to " +
                                        std::to_string(a.word_bytes()) + " bytes");
  }

  // Where indices are: -1 host memory, else the CUDA device's number (-2:
  // somewhere else).
  static std::int32_t place_of(const nb::ndarray<nb::ro, nb::c_contig>& idx) {
    if (on_host(idx)) return -1;
    if (idx.device_type() == nb::device::cuda::value) return idx.device_id();
    return -2;
  }

  // A sync gather of n indices at idx (on `device`, as place_of says) into
  // out (out_bytes, on the same device); the first bad position or -1.
  std::int64_t gather_at(const void* idx, std::uint32_t index_bytes, std::uint64_t n,
                         std::int32_t device, void* out, std::uint64_t out_bytes,
                         std::uintptr_t stream) {
    std::uint64_t first_bad = no_bad_position;
    signal_poll poll;
    call(poll, [&](const erased_array& a) {
      check_output(a, out, out_bytes, n);
      if (n == 0) return;
      const interrupt_poll p = std::ref(poll);
      if (!runtime::gpu_build()) {
        if (device != -1)
          throw warpstore::invalid_argument(
              "this is the CPU target: indices must be CPU tensors (GPU tensors need a GPU "
              "build on a machine with a GPU)");
        first_bad = a.gather(idx, index_bytes, n, out, 0, p);
      } else if (device == -1) {
        first_bad = staged_gather(a, idx, index_bytes, n, out, p);
      } else if (device >= 0) {
        if (device != device_)
          throw warpstore::invalid_argument("indices are on cuda:" + std::to_string(device) +
                                            ", the array's cache on cuda:" +
                                            std::to_string(device_));
        first_bad = a.gather(idx, index_bytes, n, out, stream, p);
      } else {
        throw warpstore::invalid_argument("indices must be on the CPU or a CUDA device");
      }
    });
    return first_bad == no_bad_position ? -1 : static_cast<std::int64_t>(first_bad);
  }

  // Finishes gather_async calls: every one (block: close() and
  // clear_cache(), holding the gate), or only those already done. The
  // error of one whose handle was dropped unwaited is raised here, once.
  void settle_pending(bool block) {
    std::vector<std::shared_ptr<pending_call>> calls;
    {
      std::lock_guard<std::mutex> lock(pending_m_);
      calls = pending_;
    }
    std::exception_ptr orphan_error;
    for (const auto& p : calls) {
      if (!block && !done(*p)) continue;
      finish(*p, {});
      std::lock_guard<std::mutex> lock(p->m);
      if (!p->orphaned || p->reported || orphan_error) continue;
      p->reported = true;
      if (p->error)
        orphan_error = p->error;
      else if (p->first_bad != no_bad_position)
        orphan_error = std::make_exception_ptr(nb::index_error(
            (path_ + ": a gather_async whose handle was dropped unwaited held an index out of "
                     "range (at position " + std::to_string(p->first_bad) + ")")
                .c_str()));
    }
    if (orphan_error && !block) std::rethrow_exception(orphan_error);
  }

 public:
  // The handle is gone: a later call (or close) finishes the gather.
  void orphan(const std::shared_ptr<pending_call>& p) {
    std::lock_guard<std::mutex> lock(p->m);
    p->orphaned = true;
  }

 private:
  const erased_array& open_array() const {
    if (!a_) throw warpstore::invalid_argument(path_ + ": the array is closed" + closed_why_, path_);
    return *a_;
  }

  // Host tensors on the GPU build: the indices go to the GPU and the rows
  // come back, through buffers of this call.
  static std::uint64_t staged_gather(const erased_array& a, const void* idx,
                                     std::uint32_t index_bytes, std::uint64_t n, void* out,
                                     const interrupt_poll& poll) {
    runtime::device_ptr<std::byte> d_idx(
        static_cast<std::byte*>(runtime::alloc_device(n * index_bytes)));
    runtime::device_ptr<std::byte> d_out(
        static_cast<std::byte*>(runtime::alloc_device(n * a.row_bytes())));
    runtime::copy_to_device(d_idx.get(), idx, n * index_bytes);
    const std::uint64_t first_bad = a.gather(d_idx.get(), index_bytes, n, d_out.get(), 0, poll);
    if (first_bad == no_bad_position)
      runtime::copy_to_host(out, d_out.get(), n * a.row_bytes());
    return first_bad;
  }

  std::string path_;
  // What it was opened with: reopen() opens the same again.
  std::uint64_t rows_, row_bytes_;
  std::uint32_t word_bytes_;
  std::uint64_t offset_;
  options opts_;
  int device_;
  std::shared_ptr<shared_cache> shared_;  // null: a cache of its own
  call_gate gate_;
  std::unique_ptr<erased_array> a_;  // null once closed; read under gate_
  std::atomic<bool> closed_{false};
  std::atomic<bool> reopen_{false};  // note_failure() asked for reopen()
  std::string closed_why_;           // why a failed reopen closed it (under gate_)
  std::atomic<std::uint64_t> reopens_{0};
  std::mutex pending_m_;
  std::vector<std::shared_ptr<pending_call>> pending_;  // gather_async calls not yet finished
};

// What gather_async returns to Python. Keeps its array alive (keep_alive).
class py_pending {
 public:
  py_pending(py_array& a, std::shared_ptr<pending_call> p) : a_(&a), p_(std::move(p)) {}
  ~py_pending() {
    if (p_) a_->orphan(p_);
  }
  py_pending(const py_pending&) = delete;
  py_pending& operator=(const py_pending&) = delete;

  // Waits for the gather (Ctrl-C cancels it); returns the first position
  // holding an out-of-range index, or -1; raises a failed read's error.
  std::int64_t wait() {
    signal_poll poll;
    {
      nb::gil_scoped_release release;
      a_->finish(*p_, std::ref(poll));
    }
    if (poll.raised) throw std::move(*poll.raised);
    std::lock_guard<std::mutex> lock(p_->m);
    if (p_->error) {
      p_->reported = true;
      std::rethrow_exception(p_->error);
    }
    return p_->first_bad == no_bad_position ? -1 : static_cast<std::int64_t>(p_->first_bad);
  }
  bool done() {
    nb::gil_scoped_release release;
    return a_->done(*p_);
  }

 private:
  py_array* a_;
  std::shared_ptr<pending_call> p_;
};

}  // namespace

void bind_array(nb::module_& m) {
  nb::class_<py_array>(m, "Array")
      .def("__init__",
           [](py_array* self, nb::bytes path_bytes, std::uint64_t rows, std::uint64_t row_bytes,
              std::uint32_t word_bytes, std::uint64_t offset, std::uint64_t cache,
              std::uint32_t line, const std::string& ctl, std::uint32_t thr,
              std::uint64_t timeout_ms, const std::string& direct,
              std::shared_ptr<shared_cache> shared) {
             // The path as bytes (os.fsencode): any name Linux allows, UTF-8 or not.
             const std::string path(path_bytes.c_str(), path_bytes.size());
             new (self) py_array(path, rows, row_bytes, word_bytes, offset,
                                 make_options(cache, line, ctl, thr, timeout_ms, direct),
                                 std::move(shared));
           },
           nb::arg("path"), nb::arg("rows"), nb::arg("row_bytes"), nb::arg("word_bytes"),
           nb::arg("offset"), nb::arg("cache"), nb::arg("line"), nb::arg("controller"),
           nb::arg("threads"), nb::arg("timeout_ms"), nb::arg("direct"),
           nb::arg("shared").none() = nb::none())
      .def("gather", &py_array::gather, nb::arg("idx"), nb::arg("out"), nb::arg("stream") = 0)
      .def("gather_raw", &py_array::gather_raw, nb::arg("idx"), nb::arg("index_bytes"),
           nb::arg("n"), nb::arg("device"), nb::arg("out"), nb::arg("out_bytes"),
           nb::arg("stream") = 0)
      .def(
          "gather_async",
          [](py_array& a, nb::ndarray<nb::ro, nb::c_contig> idx, nb::ndarray<nb::c_contig> out,
             std::uintptr_t stream) {
            return new py_pending(a, a.gather_async(idx, out, stream));
          },
          nb::arg("idx"), nb::arg("out"), nb::arg("stream") = 0, nb::keep_alive<0, 1>(),
          nb::rv_policy::take_ownership)
      .def("read", &py_array::read, nb::arg("first_byte"), nb::arg("out"),
           nb::arg("stream") = 0)
      .def("stats", &py_array::stats)
      .def("reset_stats", &py_array::reset_stats)
      .def("clear_cache", &py_array::clear_cache)
      .def("close", &py_array::close)
      .def_prop_ro("closed", &py_array::closed)
      .def_prop_ro("device", &py_array::device);

  nb::class_<shared_cache>(m, "Cache")
      .def(
          "__init__",
          [](shared_cache* self, std::uint64_t bytes, std::uint32_t line, std::uint32_t ways) {
            nb::gil_scoped_release release;  // the lines are allocated and zeroed
            new (self) shared_cache(bytes, line, ways);
          },
          nb::arg("bytes"), nb::arg("line_size"), nb::arg("ways"))
      .def_prop_ro("bytes", [](const shared_cache& c) { return std::uint64_t{c.lines->bytes()}; })
      .def_prop_ro("line_size", [](const shared_cache& c) { return c.lines->line_size(); })
      .def_prop_ro("device", [](const shared_cache& c) { return c.device; })
      .def_prop_ro("arrays",
                   [](shared_cache& c) {
                     std::lock_guard<std::mutex> lock(c.m);
                     return c.arrays.size();
                   })
      .def("stats",
           [](shared_cache& c) {
             cache_stats s{};
             {
               nb::gil_scoped_release release;
               s = c.lines->stats();
             }
             return cache_counters_dict(s);
           })
      .def("reset_stats",
           [](shared_cache& c) {
             nb::gil_scoped_release release;
             cache_share share(&c);
             c.lines->reset_stats();
           })
      .def("clear", [](shared_cache& c) {
        nb::gil_scoped_release release;
        py_array::clear_shared(c);
      });

  nb::class_<py_pending>(m, "PendingGather")
      .def("wait", &py_pending::wait)
      .def("done", &py_pending::done);
}

}  // namespace warpstore::python
