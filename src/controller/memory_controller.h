// The memory controller: the whole file in pinned host memory; a warp that
// misses executes its own READ over PCIe, with no CPU on the path. A
// read-only file is mapped and its page-cache pages pinned where the driver
// allows it (no copy, no second copy of the file in memory); otherwise, and
// for a writable file, the file is read into pinned memory. A WRITE
// goes into that memory and marks its 64 KiB chunk dirty. Durability: a FLUSH
// from a kernel only makes the writes visible in host memory (a crash of the
// process loses them); make_durable() on the host (array flush() calls it)
// writes every dirty chunk back to the file with pwrite and fdatasyncs.
#pragma once

#include "warpstore/controller.h"
#include "warpstore/runtime.h"

namespace warpstore {

class memory_controller final : public controller {
 public:
  // A read-only file with `map`: mapped and pinned in place (its pages are
  // read in first where they are not in memory); otherwise, or where that
  // is refused, read into pinned memory with `loader_threads` threads.
  // make_durable() starts writeback every `write_behind_bytes` it wrote (0:
  // never; options::write_behind_bytes). Kernels fill lines of at most
  // `fill_together` bytes several at once (options::memory_fill_together).
  memory_controller(std::shared_ptr<backing_file> file, unsigned loader_threads,
                    std::uint64_t write_behind_bytes = 0, bool map = false,
                    std::uint32_t fill_together = options{}.memory_fill_together);
  ~memory_controller() override;
  memory_controller(const memory_controller&) = delete;
  memory_controller& operator=(const memory_controller&) = delete;

  const char* name() const override { return "memory"; }
  io_ref device_ref() const override;
  controller_stats stats() const override { return {}; }  // commands run on the GPU, uncounted
  const std::byte* data() const { return bytes_; }
  // The file's own pages where they are mapped and pinned (no copy).
  const std::byte* mapped_file() const override { return map_ != nullptr ? bytes_ : nullptr; }
  void make_durable() override;
  // Raises file_error (ESTALE) once the file is shorter than at open: its
  // bytes past the new end are gone from the file but not from this
  // controller's pages, which would serve them without a word.
  void check() const override;
  std::uint64_t write_unit() const override { return std::uint64_t{1} << chunk_shift; }

  static constexpr std::uint32_t chunk_shift = 16;

 private:
  bool map_page_cache();  // the mapping, pinned; false (nothing held) if refused
  void load(unsigned loader_threads);

  std::byte* bytes_ = nullptr;  // data_ or map_
  runtime::host_mapped_ptr<std::byte> data_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  runtime::host_mapped_ptr<std::uint32_t> dirty_;  // writable files only
  std::uint64_t chunks_ = 0;
  std::uint64_t capacity_blocks_;
  std::uint64_t write_behind_bytes_;
  std::uint32_t fill_together_;  // memory_source_ref::together_bytes
};

}  // namespace warpstore
