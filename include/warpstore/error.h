// Errors travel: a failed command comes back as an NVMe status, the waiting
// thread records the first one in a device error record, and the host raises
// it as an exception after the kernel.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "warpstore/detail/platform.cuh"
#include "warpstore/nvme.h"

namespace warpstore {

// What went wrong, in a word. The first four are what a kernel records in
// an error_record; the rest are raised on the host only.
enum class error_kind : std::uint32_t {
  none = 0,
  io = 1,  // the controller completed the command with an error status
  index_out_of_range = 2,
  deadline = 3,          // a bounded wait expired
  file = 4,              // a system call on a file failed (open, stat, fdatasync): errno
  invalid_argument = 5,  // an argument or setting is out of range
  invalid_state = 6,     // a call out of order (open twice, append before recover)
  corrupt = 7,           // a file's contents fail their checks (not a log, bad checksum)
  no_space = 8,          // a log region is full
  runtime = 9,           // a CUDA call, io_uring setup or another runtime service failed
  cancelled = 10,        // the caller asked the call to stop
};

// "io", "index_out_of_range", ...: the enumerator's name.
const char* to_string(error_kind k);

// The kind of a command that completed with `st`: none on success, deadline
// for a bounded wait that gave up, io otherwise.
WARPSTORE_HD constexpr error_kind kind_of(nvme::status st) {
  return st.success() ? error_kind::none : st.is_deadline() ? error_kind::deadline : error_kind::io;
}

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
  WARPSTORE_HD WARPSTORE_COLD void record_failed(std::uint32_t src, nvme::status st,
                                                 std::uint64_t idx, std::uint64_t block) {
    record(st.is_deadline() ? error_kind::deadline : error_kind::io, src, st, idx, block);
  }
};

// ---- exceptions --------------------------------------------------------------
//
// Every exception warpstore raises derives from warpstore::error, and also
// from the standard exception its kind suggests, so code that catches
// std::invalid_argument or std::system_error keeps working:
//
//   error (fields: kind, path, index, lba, offset, status, errno, count)
//   |- io_error            : std::runtime_error  a failed command (kind io or deadline)
//   |  '- index_error                            an index a kernel asked for out of range
//   |- file_error          : std::system_error   a failed system call on a file
//   |- invalid_argument    : std::invalid_argument
//   |- logic_error         : std::logic_error    a call out of order
//   |- runtime_error       : std::runtime_error  CUDA, io_uring setup, broken invariants
//   |- checkpoint_error    : std::runtime_error  (durable/checkpoint.cuh)
//   '- log_error           : std::runtime_error  (durable/log.cuh)
//
// warpstore::error is not itself a std::exception (each error has exactly one
// std::exception base, so catch (const std::exception&) still matches); it
// declares what() so a handler for it can print the message.

// What an error knows about where it happened; a field is empty (nullopt,
// "", 0, status ok) where the thrower does not know it.
struct error_info {
  error_kind kind = error_kind::none;
  std::string path;                          // the file involved
  std::optional<std::uint64_t> index;        // element (row, entry, line) the call asked for
  std::optional<std::uint64_t> lba;          // first logical block of the failed command
  std::optional<std::uint64_t> offset;       // byte offset in the file
  nvme::status status = nvme::status::ok();  // the failed command's NVMe status
  int sys_errno = 0;                         // errno of a failed system call
  std::uint64_t count = 1;                   // errors seen (a kernel records the first of many)
};

// What a failed system call on `path` knows (kind file).
error_info file_info(std::string path, int err, std::optional<std::uint64_t> offset = std::nullopt);

class error {
 public:
  virtual ~error() = default;
  // The message: names the file, the element and the status where known.
  virtual const char* what() const noexcept = 0;

  const error_info& info() const noexcept { return info_; }
  error_kind kind() const noexcept { return info_.kind; }
  const std::string& path() const noexcept { return info_.path; }
  nvme::status status() const noexcept { return info_.status; }
  std::optional<std::uint64_t> offset() const noexcept { return info_.offset; }

 protected:
  explicit error(error_info info) : info_(std::move(info)) {}
  error(const error&) = default;
  error& operator=(const error&) = default;

 private:
  error_info info_;
};

namespace detail {

// An error that is also the standard exception `Std`; its what() answers
// for both bases.
template <class Std>
class error_as : public Std, public error {
 public:
  template <class... StdArgs>
  explicit error_as(error_info info, StdArgs&&... std_args)
      : Std(std::forward<StdArgs>(std_args)...), error(std::move(info)) {}
  const char* what() const noexcept override { return Std::what(); }
};

}  // namespace detail

// Raised on the host for an error a kernel recorded: the element index, the
// LBA (and byte offset) of the failed command and its status are always set.
// `where` names the file.
class io_error : public detail::error_as<std::runtime_error> {
 public:
  io_error(const error_record& rec, const std::string& where);
  std::uint64_t index() const { return info().index.value_or(0); }
  // 0 where no command was issued (an index out of range, a refused write).
  std::uint64_t lba() const { return info().lba.value_or(0); }
  std::uint64_t count() const { return info().count; }
};

// Raised on the host for an index a kernel asked for out of range.
class index_error : public io_error {
 public:
  using io_error::io_error;
};

// A system call on a file failed (open, stat, ioctl, write, fdatasync):
// errno and the path, so bindings can raise the platform's own error
// (Python: PermissionError, FileNotFoundError, ... with the filename).
class file_error : public detail::error_as<std::system_error> {
 public:
  file_error(int err, const std::string& what, std::string path,
             std::optional<std::uint64_t> offset = std::nullopt);
};

// An argument or setting out of range; `path` names the file it concerns.
// Also a writable array whose bytes another writer holds (array_base::
// write_footprint; `offset` is the first byte both want).
class invalid_argument : public detail::error_as<std::invalid_argument> {
 public:
  explicit invalid_argument(const std::string& what, std::string path = {},
                            std::optional<std::uint64_t> offset = std::nullopt);
};

// A call out of order (a checkpoint group opened twice, a log appended to
// before recovery).
class logic_error : public detail::error_as<std::logic_error> {
 public:
  explicit logic_error(const std::string& what, std::string path = {});
};

// A failed CUDA call, a runtime service that could not be set up, or a broken
// invariant; `info` says more where the thrower knows it.
class runtime_error : public detail::error_as<std::runtime_error> {
 public:
  explicit runtime_error(const std::string& what);
  runtime_error(const std::string& what, error_info info);
};

// "generic/LBA out of range (0x0/0x80)" and friends.
std::string describe(nvme::status st);

// Raises what `rec` recorded: index_error for an index out of range,
// io_error otherwise. `where` names the file.
[[noreturn]] void raise_recorded(const error_record& rec, const std::string& where);

}  // namespace warpstore
