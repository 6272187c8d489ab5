#include <cstdio>
#include <string>
#include <utility>

#include "warpstore/error.h"

namespace warpstore {

std::string describe(nvme::status st) {
  const char* what = "unknown";
  const std::uint8_t c = st.code();
  switch (st.type()) {
    case nvme::status_type::generic:
      what = c == nvme::sc::success            ? "success"
             : c == nvme::sc::invalid_opcode   ? "invalid opcode"
             : c == nvme::sc::invalid_field    ? "invalid field"
             : c == nvme::sc::data_transfer_error ? "data transfer error"
             : c == nvme::sc::internal_error   ? "internal error"
             : c == nvme::sc::abort_requested  ? "abort requested"
             : c == nvme::sc::invalid_namespace ? "invalid namespace"
             : c == nvme::sc::command_sequence_error ? "command sequence error"
             : c == nvme::sc::prp_offset_invalid ? "PRP offset invalid"
             : c == nvme::sc::namespace_write_protected
                 ? "namespace is write protected (file opened read-only)"
             : c == nvme::sc::lba_out_of_range ? "LBA out of range"
             : c == nvme::sc::namespace_not_ready ? "namespace not ready"
                                               : "generic error";
      break;
    case nvme::status_type::command_specific:
      what = c == nvme::sc::completion_queue_invalid   ? "completion queue invalid"
             : c == nvme::sc::invalid_queue_identifier ? "invalid queue identifier"
             : c == nvme::sc::invalid_queue_size       ? "invalid queue size"
             : c == nvme::sc::invalid_queue_deletion   ? "invalid queue deletion"
                                                       : "command specific error";
      break;
    case nvme::status_type::media:
      what = c == nvme::sc::unrecovered_read ? "unrecovered read error"
             : c == nvme::sc::write_fault    ? "write fault"
                                             : "media error";
      break;
    case nvme::status_type::vendor:
      what = c == nvme::sc::deadline_exceeded    ? "deadline exceeded"
             : c == nvme::sc::index_out_of_range ? "index out of range"
             : c == nvme::sc::no_victim          ? "no cache line free"
             : c == nvme::sc::starved            ? "no cache line free while its set kept changing"
                                                 : "vendor error";
      break;
    default:
      break;
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s (sct 0x%x, sc 0x%02x)", what,
                static_cast<unsigned>(st.type()), static_cast<unsigned>(c));
  return buf;
}

namespace {
std::string message(const error_record& r, const std::string& where) {
  std::string m = where + ": ";
  switch (r.kind) {
    case error_kind::index_out_of_range:
      m += "index " + std::to_string(r.index) + " out of range";
      break;
    case error_kind::deadline: {
      const nvme::status st{r.status};
      const bool vendor = st.type() == nvme::status_type::vendor;
      m += "deadline exceeded reading element " + std::to_string(r.index) + " at LBA " +
           std::to_string(r.lba) + ": " + describe(st);
      if (vendor && st.code() == nvme::sc::no_victim)
        m += "; every line of its cache set stayed pinned for the whole wait: the call pins more "
             "lines at once than the cache holds (a larger cache, more ways, or fewer lines "
             "pinned at once)";
      if (vendor && st.code() == nvme::sc::starved)
        m += "; its cache set kept changing for the whole wait (" +
             std::to_string(detail::deadline::max_extension) +
             " deadlines), but other reads took every line freed there: the call wants far "
             "more lines of one set at once than the cache holds (a larger cache, or a longer "
             "deadline)";
      break;
    }
    default:
      if (nvme::status{r.status}.type() == nvme::status_type::generic &&
          nvme::status{r.status}.code() == nvme::sc::namespace_write_protected) {
        // array_ref::store / write_span on an array over a read-only open.
        m += "write to element " + std::to_string(r.index) +
             " refused: " + describe(nvme::status{r.status});
        break;
      }
      m += "I/O error reading element " + std::to_string(r.index) + " at LBA " +
           std::to_string(r.lba) + " (byte " + std::to_string(r.lba * nvme::block_size) +
           "): " + describe(nvme::status{r.status});
      break;
  }
  if (r.count > 1) m += " (and " + std::to_string(r.count - 1) + " more errors)";
  return m;
}

// The record's fields; no LBA (nor offset) where no command was issued.
error_info recorded_info(const error_record& r, const std::string& where) {
  error_info i;
  i.kind = r.kind;
  i.path = where;
  i.index = r.index;
  i.status = nvme::status{r.status};
  i.count = r.count;
  const bool refused = i.status.type() == nvme::status_type::generic &&
                       i.status.code() == nvme::sc::namespace_write_protected;
  if (r.kind != error_kind::index_out_of_range && !refused) {
    i.lba = r.lba;
    i.offset = r.lba * nvme::block_size;
  }
  return i;
}

error_info with_kind(error_kind k, std::string path, std::optional<std::uint64_t> offset = {}) {
  error_info i;
  i.kind = k;
  i.path = std::move(path);
  i.offset = offset;
  return i;
}

}  // namespace

error_info file_info(std::string path, int err, std::optional<std::uint64_t> offset) {
  error_info i = with_kind(error_kind::file, std::move(path), offset);
  i.sys_errno = err;
  return i;
}

const char* to_string(error_kind k) {
  switch (k) {
    case error_kind::none:
      return "none";
    case error_kind::io:
      return "io";
    case error_kind::index_out_of_range:
      return "index_out_of_range";
    case error_kind::deadline:
      return "deadline";
    case error_kind::file:
      return "file";
    case error_kind::invalid_argument:
      return "invalid_argument";
    case error_kind::invalid_state:
      return "invalid_state";
    case error_kind::corrupt:
      return "corrupt";
    case error_kind::no_space:
      return "no_space";
    case error_kind::runtime:
      return "runtime";
    case error_kind::cancelled:
      return "cancelled";
  }
  return "unknown";
}

io_error::io_error(const error_record& rec, const std::string& where)
    : error_as(recorded_info(rec, where), message(rec, where)) {}

file_error::file_error(int err, const std::string& what, std::string path,
                       std::optional<std::uint64_t> offset)
    : error_as(file_info(std::move(path), err, offset), err, std::generic_category(), what) {}

invalid_argument::invalid_argument(const std::string& what, std::string path,
                                   std::optional<std::uint64_t> offset)
    : error_as(with_kind(error_kind::invalid_argument, std::move(path), offset), what) {}

logic_error::logic_error(const std::string& what, std::string path)
    : error_as(with_kind(error_kind::invalid_state, std::move(path)), what) {}

runtime_error::runtime_error(const std::string& what)
    : error_as(with_kind(error_kind::runtime, {}), what) {}

runtime_error::runtime_error(const std::string& what, error_info info)
    : error_as(
          [&] {
            if (info.kind == error_kind::none) info.kind = error_kind::runtime;
            return std::move(info);
          }(),
          what) {}

void raise_recorded(const error_record& rec, const std::string& where) {
  if (rec.kind == error_kind::index_out_of_range) throw index_error(rec, where);
  throw io_error(rec, where);
}

}  // namespace warpstore
