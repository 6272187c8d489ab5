// Errors travel: a failed command comes back as an NVMe status, the waiting
// thread records the first one in a device error record, and the host raises
// it as an exception after the kernel.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "warpstore/detail/platform.cuh"
#include "warpstore/nvme.h"

namespace warpstore {

enum class error_kind : std::uint32_t {
  none = 0,
  io = 1,               // the controller completed the command with an error status
  index_out_of_range = 2,
  deadline = 3,         // a bounded wait expired
};

namespace detail {

// First-one-wins records (error_record, checkpoint_fault): a record's
// `state` is 0 empty, 1 being written, 2 complete. Counts the error; true for
// the one caller that fills the record, which then calls publish_record.
WARPSTORE_HD inline bool claim_record(std::uint32_t& state, std::uint64_t& count) {
  device_atomic<std::uint64_t>(count).fetch_add(1, memory_order_relaxed);
  std::uint32_t expected = 0;
  return device_atomic<std::uint32_t>(state).compare_exchange_strong(expected, 1,
                                                                     memory_order_relaxed);
}
WARPSTORE_HD inline void publish_record(std::uint32_t& state) {
  device_atomic<std::uint32_t>(state).store(2, memory_order_release);
}

}  // namespace detail

// Lives in device memory, one per array (or shared); the first error wins.
struct error_record {
  std::uint32_t state;  // 0 empty, 1 being written, 2 complete
  error_kind kind;
  std::uint32_t source;
  std::uint16_t status;  // nvme::status::raw
  std::uint16_t reserved;
  std::uint64_t index;   // element index that failed
  std::uint64_t lba;     // first logical block of the failed command
  std::uint64_t count;   // every error seen, first or not

  WARPSTORE_HD void record(error_kind k, std::uint32_t src, nvme::status st, std::uint64_t idx,
                           std::uint64_t block) {
    if (!detail::claim_record(state, count)) return;
    kind = k;
    source = src;
    status = st.raw;
    index = idx;
    lba = block;
    detail::publish_record(state);
  }
  // A command that failed with status `st`: a deadline if it timed out,
  // else an I/O error.
  WARPSTORE_HD void record_failed(std::uint32_t src, nvme::status st, std::uint64_t idx,
                                  std::uint64_t block) {
    record(st.is_deadline() ? error_kind::deadline : error_kind::io, src, st, idx, block);
  }
};

// Raised on the host for an error a kernel recorded.
class io_error : public std::runtime_error {
 public:
  io_error(const error_record& rec, const std::string& where);
  error_kind kind() const { return record_.kind; }
  nvme::status status() const { return nvme::status{record_.status}; }
  std::uint64_t index() const { return record_.index; }
  std::uint64_t lba() const { return record_.lba; }
  std::uint64_t count() const { return record_.count; }

 private:
  error_record record_;
};

// Raised on the host for an index a kernel asked for out of range.
class index_error : public io_error {
 public:
  using io_error::io_error;
};

// A system call on a file failed (open, stat, ioctl): errno and the path, so
// bindings can raise the platform's own error (Python: PermissionError,
// FileNotFoundError, ... with the filename).
class file_error : public std::system_error {
 public:
  file_error(int err, const std::string& what, std::string path)
      : std::system_error(err, std::generic_category(), what), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// "generic/LBA out of range (0x0/0x80)" and friends.
std::string describe(nvme::status st);

// Raises what `rec` recorded: index_error for an index out of range,
// io_error otherwise. `where` names the file.
[[noreturn]] void raise_recorded(const error_record& rec, const std::string& where);

}  // namespace warpstore
