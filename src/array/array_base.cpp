#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "warpstore/array.cuh"

#include "controller/bulk_reader.h"
#include "warpstore/runtime.h"

namespace warpstore::detail {

array_base::array_base(std::shared_ptr<warpstore::cache> c, std::shared_ptr<controller> ctl,
                       std::uint64_t count, std::uint64_t byte_offset, std::uint32_t elem_size,
                       const options& opts)
    : cache_(std::move(c)),
      controller_(std::move(ctl)),
      count_(count),
      byte_offset_(byte_offset),
      timeout_ns_(opts.timeout_ns),
      bulk_chunk_(opts.bulk_chunk),
      bounds_check_(opts.bounds_check),
      eager_write_back_(opts.eager_write_back),
      overlapped_eviction_(opts.overlapped_eviction) {
  if (!cache_ || !controller_) throw invalid_argument("array needs a cache and a controller");
  const std::string& path = controller_->file().path();
  const std::uint64_t file_size = controller_->file().size_bytes();
  if (elem_size == 0 || !std::has_single_bit(elem_size) || elem_size > cache_->line_size())
    throw invalid_argument(path + ": element size " + std::to_string(elem_size) +
                               " must be a power of two no larger than the line size " +
                               std::to_string(cache_->line_size()),
                           path);
  if (byte_offset % nvme::block_size != 0)
    throw invalid_argument(path + ": byte offset " + std::to_string(byte_offset) +
                               " is not a multiple of the " + std::to_string(nvme::block_size) +
                               "-byte block size",
                           path, byte_offset);
  if (byte_offset > file_size)
    throw invalid_argument(path + ": byte offset " + std::to_string(byte_offset) +
                               " is past the end of the file (" + std::to_string(file_size) +
                               " bytes)",
                           path, byte_offset);
  if (count_ == 0) count_ = (file_size - byte_offset) / elem_size;
  if (count_ == 0) throw invalid_argument(path + ": no element fits in the file", path);
  if (count_ > (file_size - byte_offset) / elem_size)
    throw invalid_argument(path + ": " + std::to_string(count_) + " elements of " +
                               std::to_string(elem_size) + " bytes at offset " +
                               std::to_string(byte_offset) + " need more than the file's " +
                               std::to_string(file_size) + " bytes",
                           path);
  elems_per_line_log2_ =
      static_cast<std::uint32_t>(std::countr_zero(cache_->line_size() / elem_size));
  // Before anything is handed out that a refusal would leave behind.
  if (writable()) lock_write_footprint();
  source_ = cache_->next_source_id();
  cache_->register_source(source_, cache_source{controller_->device_ref(),
                                                byte_offset >> nvme::block_shift,
                                                controller_->file().capacity_blocks()});
  errors_ = runtime::make_device<error_record>(1);
  bulk_ = host_detail::bulk_reader::acquire();
}

std::uint64_t array_base::size_bytes() const {
  const auto line_log2 = static_cast<std::uint32_t>(std::countr_zero(cache_->line_size()));
  return count_ << (line_log2 - elems_per_line_log2_);
}

file_range_lock::range array_base::write_footprint() const {
  const std::uint64_t line = cache_->line_size();
  const std::uint64_t unit = std::max<std::uint64_t>(1, controller_->write_unit());
  const std::uint64_t lines_end = byte_offset_ + (size_bytes() + line - 1) / line * line;
  return {byte_offset_ / unit * unit,
          std::min(controller_->file().size_bytes(), (lines_end + unit - 1) / unit * unit)};
}

// Several writers of one file are partitioned by byte range. Each writable
// array locks its write footprint for as long as it lives: had two writers'
// footprints overlapped, each would write back the other's bytes with what
// its cache held, stale, and the last write-back would win. The lock is an
// OFD lock (backing_file::lock_range): it conflicts with every other open of
// the file (another process, or a controller of this process with a
// descriptor of its own), never with arrays sharing this array's controller
// (one descriptor: code that shares a controller between writable arrays
// keeps their ranges apart itself). It does not wait: a conflict raises at
// once, before the array has written anything.
//
// Read-only arrays take no lock and are not excluded: a reader of bytes
// another process is writing sees what its cache holds, which may be older
// than the file (what it read before, or a line read while the writer had
// written back only some of it).
void array_base::lock_write_footprint() {
  const file_range_lock::range want = write_footprint();
  write_lock_ = controller_->file().lock_range(want.first, want.end);
  if (!write_lock_.conflict()) return;  // held, or no OFD locks on this filesystem
  const file_range_lock::range other = *write_lock_.conflict();
  const std::string& p = path();
  const std::string line = std::to_string(cache_->line_size());
  const std::uint64_t unit = controller_->write_unit();
  std::string m = p + ": bytes " + to_string(want) +
                  " cannot be opened for writing: another writer holds bytes " +
                  to_string(other) +
                  " (another process, or a writable array of this process with a controller of "
                  "its own). This array (" + std::to_string(count_) + " elements of " +
                  std::to_string(size_bytes() / count_) + " bytes at byte offset " +
                  std::to_string(byte_offset_) + ") writes back whole " + line +
                  "-byte cache lines";
  if (unit > 1)
    m += ", and its " + std::string(controller_->name()) + " controller whole " +
         std::to_string(unit) + "-byte chunks of the file";
  m += ", so it writes bytes " + to_string(want) +
       ". Give each writer its own bytes: start each writer at or after the end of the "
       "previous writer's last cache line (line size " + line +
       " bytes), e.g. split the rows at multiples of " + line +
       " bytes from the first writer's byte offset";
  if (unit > 1) m += ", the file at multiples of " + std::to_string(unit) + " bytes";
  throw invalid_argument(m, p, std::max(want.first, other.first));
}

void array_base::read_range(std::uint64_t first_byte, std::uint64_t bytes, void* dst,
                            std::uintptr_t stream, const std::function<bool()>& interrupt) {
  const std::uint64_t size = size_bytes();
  if (first_byte > size || bytes > size - first_byte)
    throw invalid_argument(path() + ": bytes [" + std::to_string(first_byte) + ", " +
                               std::to_string(first_byte) + " + " + std::to_string(bytes) +
                               ") are outside the array's " + std::to_string(size) + " bytes",
                           path(), byte_offset_ + std::min(first_byte, size));
  if (bytes == 0) return;
  // The file is what the read sees: the array's dirty lines go there first.
  if (writable()) flush();
  controller_->check();
  if (controller_->file().is_device_namespace()) {
    error_info info;
    info.kind = error_kind::runtime;
    info.path = path();
    throw runtime_error(path() + ": bulk reads are not built for the " +
                            std::string(controller_->name()) +
                            " controller (no file to read beside the device's queues); read "
                            "through kernels or gathers",
                        info);
  }
  const std::uint64_t at = byte_offset_ + first_byte;
  // The memory controller's pinned mapping of the page cache: the copy
  // engine reads it straight into GPU memory (no pread into bounce buffers,
  // no helper thread). Host destinations keep pread's threads, which copy
  // faster than one memcpy.
  if (const std::byte* mapped = controller_->mapped_file();
      mapped != nullptr && runtime::is_device_memory(dst)) {
    bulk_->copy_pinned(mapped + at, bytes, dst, stream, interrupt, path(), at);
    return;
  }
  bulk_->read(controller_->file(), at, bytes, dst, stream, interrupt, bulk_chunk_);
}

array_base::~array_base() {
  try {
    if (controller_ && controller_->file().writable()) flush();
  } catch (...) {
    // A destructor cannot raise; flush() did what it could.
  }
}

void array_base::flush() {
  const detail::line_io lines{cache_->ref(), controller_->device_ref(), errors_.get(),
                              byte_offset_ >> nvme::block_shift,
                              controller_->file().capacity_blocks(), timeout_ns_, source_};
  if (controller_->file().writable()) {
    detail::flush_lines(lines);
    check();  // a failed write-back must not be reported durable
    controller_->make_durable();
  }
  check();
}

void array_base::check() const {
  controller_->check();
  error_record rec{};
  runtime::copy_to_host(&rec, errors_.get(), sizeof rec);
  if (rec.count == 0) return;
  runtime::memset_device(errors_.get(), 0, sizeof rec);
  const std::string where = controller_->file().path();
  raise_recorded(rec, where);
}

}  // namespace warpstore::detail
