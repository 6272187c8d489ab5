// Storage-backed arrays. The owning host object `array<T>` opens the backing
// file, holds the cache and the controller, and hands out `array_ref<T>`:
// a small trivially-copyable view passed by value to kernels.
//
//   warpstore::array<float> a("/data/features.bin", n);   // host
//   kernel<<<g, b>>>(a.ref());                              // x = ref[i] on the GPU
//   a.check();                                              // raises what a kernel hit
//
// Writes (options::writable): ref.store(i, v) / write_span on the GPU, then
// a.flush() on the host makes them durable.
//
// Several writers of one file (processes, or arrays over controllers of
// their own) each take a byte range: a writable array locks the bytes it
// may write back (array_base::write_footprint) and refuses to open over
// bytes another writer holds. Readers take no lock.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "warpstore/cache.cuh"
#include "warpstore/controller.h"
#include "warpstore/detail/array_ref.cuh"
#include "warpstore/error.h"
#include "warpstore/settings.h"

namespace warpstore {

namespace host_detail {
class bulk_reader;
}

namespace detail {

// Everything of array<T> that does not depend on T.
class array_base {
 public:
  array_base(std::shared_ptr<warpstore::cache> c, std::shared_ptr<controller> ctl,
             std::uint64_t count, std::uint64_t byte_offset, std::uint32_t elem_size,
             const options& opts);
  // Flushes what the array wrote (best effort: errors are lost here; call
  // flush() to see them), so no dirty line outlives its controller.
  ~array_base();
  array_base(array_base&&) = default;  // the moved-from array flushes nothing
  array_base& operator=(array_base&&) = delete;

  std::uint64_t size() const { return count_; }
  std::uint64_t byte_offset() const { return byte_offset_; }
  warpstore::cache& cache() const { return *cache_; }
  const std::shared_ptr<warpstore::cache>& shared_cache() const { return cache_; }
  const std::shared_ptr<controller>& shared_controller() const { return controller_; }
  // This array's source id in its cache (cache::retire_source, once it is gone).
  std::uint32_t source_id() const { return source_; }
  const std::string& path() const { return controller_->file().path(); }
  cache_stats stats() const { return cache_->stats(); }
  // Raises index_error or io_error for the first error a kernel recorded
  // through this array since the last check, then clears it. Also raises if
  // the controller itself failed.
  void check() const;
  // Returns once every dirty line of this array is written and durable:
  // writes them back (a kernel over the cache, between kernels: nothing of
  // this array may be pinned), sends a FLUSH through the queues (host
  // controller: fdatasync), and has the controller make what it holds
  // durable (memory controller: dirty chunks to the file, fdatasync). Then
  // raises what failed, like check().
  void flush();
  // The array's size in bytes (size() elements).
  std::uint64_t size_bytes() const;
  // Bulk read: copies the array's bytes [first_byte, first_byte + bytes)
  // (counted from the array's first byte) into `dst` and returns once they
  // are there, without the cache: large chunks read by several threads at
  // once (src/controller/bulk_reader.h), through reused pinned buffers and
  // the copy engines where `dst` is GPU memory; where the controller holds
  // the file's page cache mapped and pinned (the memory controller over a
  // read-only file), GPU destinations are the copy engine reading that
  // mapping, with no thread reading the file. `dst` is GPU memory of the
  // current device on the GPU target (the copies wait for the work queued so
  // far on `stream`, a cudaStream_t, 0 the default stream) or host memory on
  // either target.
  // A writable array first writes back what it holds dirty (flush(), so
  // nothing of it may be pinned and no kernel may write it meanwhile): the
  // read returns what the array's own writes left. `interrupt`, if set, is
  // called every few milliseconds and may stop the read (runtime_error of
  // kind cancelled). Raises invalid_argument for a range outside the array,
  // file_error (path, offset) for a failed or short read. Safe from several
  // threads at once.
  void read_range(std::uint64_t first_byte, std::uint64_t bytes, void* dst,
                  std::uintptr_t stream = 0, const std::function<bool()>& interrupt = {});
  // Whether the backing file was opened read-write (options::writable).
  bool writable() const { return controller_->file().writable(); }
  // The bytes of the file a writable array may write: its lines are written
  // back whole (the last one too, past the array's end, up to the end of the
  // file), and the memory controller writes back whole 64 KiB chunks
  // (controller::write_unit). A writable array holds a write lock on them
  // while it lives.
  file_range_lock::range write_footprint() const;
  // Whether this array holds that lock: false for a read-only array, and
  // where the filesystem has no OFD locks (backing_file::lock_range), where
  // overlapping writers then go undetected.
  bool write_locked() const { return write_lock_.held(); }
  // A view of the array's bytes (what a checkpoint copies): the ref of this
  // array with byte elements, every option included.
  array_ref<std::byte> byte_ref() const {
    array_ref<std::byte> r = make_ref<std::byte>();
    const std::uint32_t line_log2 =
        static_cast<std::uint32_t>(std::countr_zero(cache_->line_size()));
    r.count = count_ << (line_log2 - elems_per_line_log2_);  // elements times their size
    r.elems_per_line_log2 = line_log2;
    return r;
  }

 protected:
  template <class T>
  array_ref<T> make_ref(bool wake = true) const {
    if (wake) controller_->wake();  // a kernel over the ref is probably coming
    array_ref<T> r{};
    r.cache = cache_->ref();
    r.io = controller_->device_ref();
    r.errors = errors_.get();
    r.count = count_;
    r.first_block = byte_offset_ >> nvme::block_shift;
    // Lines stop at the end of the file, not of the array: the last line of an
    // array is read whole where the file allows.
    r.end_block = controller_->file().capacity_blocks();
    r.timeout_ns = timeout_ns_;
    r.source = source_;
    r.elems_per_line_log2 = elems_per_line_log2_;
    r.bounds_check = bounds_check_;
    r.writable = controller_->file().writable();
    r.eager_write_back = eager_write_back_;
    r.overlapped_eviction = overlapped_eviction_;
    return r;
  }

 private:
  // Takes write_lock_ on write_footprint(), or raises invalid_argument naming
  // the other writer's bytes (array_base.cpp says why).
  void lock_write_footprint();

  std::shared_ptr<warpstore::cache> cache_;
  std::shared_ptr<controller> controller_;
  std::shared_ptr<host_detail::bulk_reader> bulk_;  // the process's, for read_range
  runtime::device_ptr<error_record> errors_;
  std::uint64_t count_;
  std::uint64_t byte_offset_;
  std::uint64_t timeout_ns_;
  std::uint64_t bulk_chunk_;  // options::bulk_chunk
  std::uint32_t source_;
  std::uint32_t elems_per_line_log2_;
  bool bounds_check_;
  bool eager_write_back_;
  bool overlapped_eviction_;
  // Last: released before controller_ may close the file.
  file_range_lock write_lock_;
};

}  // namespace detail

template <class T>
class array : public detail::array_base {
 public:
  // Opens `path` with a cache and a controller of its own. `count` 0 means
  // every whole element between `byte_offset` and the end of the file.
  explicit array(const std::string& path, std::uint64_t count = 0,
                 const options& opts = options::from_environment(), std::uint64_t byte_offset = 0)
      : array(std::make_shared<warpstore::cache>(opts), make_controller(path, opts), count,
              byte_offset, opts) {}

  // Shares `c` and `ctl` with other arrays (over the same file, or not).
  array(std::shared_ptr<warpstore::cache> c, std::shared_ptr<controller> ctl, std::uint64_t count,
        std::uint64_t byte_offset, const options& opts = options::from_environment())
      : detail::array_base(std::move(c), std::move(ctl), count, byte_offset, sizeof(T), opts) {}

  array_ref<T> ref() const { return make_ref<T>(); }
  // The same without waking the controller's service threads: for a caller
  // that wakes them itself once its kernel turns out to need them (a small
  // gather that hits ends before they could help).
  array_ref<T> quiet_ref() const { return make_ref<T>(false); }
};

}  // namespace warpstore
