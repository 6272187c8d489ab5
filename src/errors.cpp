#include <cstdio>
#include <string>

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
             : c == nvme::sc::namespace_write_protected
                 ? "namespace is write protected (file opened read-only)"
             : c == nvme::sc::lba_out_of_range ? "LBA out of range"
                                               : "generic error";
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
    case error_kind::deadline:
      m += "deadline exceeded reading element " + std::to_string(r.index) + " at LBA " +
           std::to_string(r.lba) + ": " + describe(nvme::status{r.status});
      break;
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
}  // namespace

io_error::io_error(const error_record& rec, const std::string& where)
    : std::runtime_error(message(rec, where)), record_(rec) {}

void raise_recorded(const error_record& rec, const std::string& where) {
  if (rec.kind == error_kind::index_out_of_range) throw index_error(rec, where);
  throw io_error(rec, where);
}

}  // namespace warpstore
