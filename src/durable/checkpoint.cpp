// Host side of checkpoint groups (include/warpstore/durable/checkpoint.cuh):
// registration, the file's layout and sizing, the device state, and the host
// forms of checkpoint and restore, which run the device form on the target
// (a kernel, or std::threads on the CPU target) and raise what failed.
#include "warpstore/durable/checkpoint.cuh"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "warpstore/error.h"

namespace warpstore {

namespace {

enum op_code : int { op_scan = 0, op_checkpoint = 1, op_restore = 2 };

std::string errno_text(int e) { return std::string(std::strerror(e)); }

[[noreturn]] void raise_sys(const std::string& path, const std::string& what, int e) {
  throw checkpoint_error(
      "checkpoint file " + path + ": " + what + ": " + errno_text(e), checkpoint_phase::none,
      nvme::status::make(nvme::status_type::generic, nvme::sc::internal_error), file_info(path, e));
}

// What a checkpoint_error knows besides its status: the group's file, and
// the kind where the status does not tell it.
error_info group_info(const std::string& path, error_kind kind = error_kind::none) {
  error_info i;
  i.kind = kind;
  i.path = path;
  return i;
}

// Creates `path` if missing and grows it to at least `bytes` (zeros); the
// new size is made durable (fsync, and the directory's for a new file) so a
// crash cannot leave the file shorter than its records say.
void size_file(const std::string& path, std::uint64_t bytes) {
  bool created = false;
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created = fd >= 0;
  }
  if (fd < 0) raise_sys(path, "open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    raise_sys(path, "fstat", e);
  }
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    ::close(fd);
    throw invalid_argument("checkpoint file " + path + " is not a regular file", path);
  }
  if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) < bytes) {
    // Zeros written, not a hole: every later checkpoint overwrites blocks
    // already allocated, so its FLUSH has no allocation to commit (and
    // O_DIRECT writes into holes of a sparse file stalled the host
    // controller's rings on ext4 for a second or more).
    const std::vector<char> zeros(std::size_t{1} << 20, 0);
    for (std::uint64_t at = static_cast<std::uint64_t>(st.st_size); at < bytes;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(zeros.size(), bytes - at));
      const ssize_t w = ::pwrite(fd, zeros.data(), n, static_cast<off_t>(at));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int e = w < 0 ? errno : EIO;
        ::close(fd);
        raise_sys(path, "growing it to " + std::to_string(bytes) + " bytes", e);
      }
      at += static_cast<std::uint64_t>(w);
    }
    if (::fsync(fd) != 0) {
      const int e = errno;
      ::close(fd);
      raise_sys(path, "fsync after growing it", e);
    }
  }
  ::close(fd);
  if (created) {
    const std::size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);  // best effort: some file systems refuse fsync on directories
      ::close(dfd);
    }
  }
}

std::uint64_t hash_layout(const std::vector<std::uint64_t>& sizes) {
  std::uint64_t h = detail::mix64(0xC4EC4901ull + sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) h = detail::mix64(h ^ ckpt::mix(sizes[i], i));
  return h;
}

}  // namespace

const char* to_string(checkpoint_phase p) {
  switch (p) {
    case checkpoint_phase::none: return "none";
    case checkpoint_phase::data_write: return "writing data";
    case checkpoint_phase::data_read: return "reading data";
    case checkpoint_phase::flush_data: return "FLUSH before the commit record";
    case checkpoint_phase::record_write: return "writing the commit record";
    case checkpoint_phase::flush_record: return "FLUSH after the commit record";
    case checkpoint_phase::record_read: return "reading the commit records";
    case checkpoint_phase::scratch_wait: return "waiting for a staging buffer";
    case checkpoint_phase::select_wait: return "waiting for the warp choosing the record";
    case checkpoint_phase::array_read: return "reading the array through its cache";
    case checkpoint_phase::array_write: return "writing the array through its cache";
  }
  return "unknown";
}

const char* to_string(checkpoint_outcome o) {
  switch (o) {
    case checkpoint_outcome::none: return "none";
    case checkpoint_outcome::committed: return "committed";
    case checkpoint_outcome::restored: return "restored";
    case checkpoint_outcome::empty: return "empty (no checkpoint yet)";
    case checkpoint_outcome::data_mismatch: return "data checksum mismatch";
    case checkpoint_outcome::layout_mismatch: return "layout mismatch";
    case checkpoint_outcome::failed: return "failed";
    case checkpoint_outcome::scanned: return "scanned";
  }
  return "unknown";
}

checkpoint_group::checkpoint_group() = default;
checkpoint_group::~checkpoint_group() = default;

checkpoint_group& checkpoint_group::add(void* device, std::uint64_t bytes, std::string name) {
  if (controller_) throw logic_error("checkpoint group: add('" + name + "') after open()", path_);
  if (device == nullptr) throw invalid_argument("checkpoint buffer '" + name + "' is null");
  if (bytes == 0) throw invalid_argument("checkpoint buffer '" + name + "' has 0 bytes");
  if (reinterpret_cast<std::uintptr_t>(device) % 16 != 0)
    throw invalid_argument("checkpoint buffer '" + name +
                           "' is not 16-byte aligned (device allocations are)");
  entry e;
  e.buffer = {};
  e.buffer.kind = checkpoint_buffer_kind::device;
  e.buffer.device = static_cast<std::byte*>(device);
  e.buffer.bytes = bytes;
  e.name = std::move(name);
  buffers_.push_back(std::move(e));
  return *this;
}

checkpoint_group& checkpoint_group::add_array(detail::array_base& a,
                                              const array_ref<std::byte>& view,
                                              std::uint64_t bytes, std::string name) {
  if (controller_) throw logic_error("checkpoint group: add('" + name + "') after open()", path_);
  entry e;
  e.buffer = {};
  e.buffer.kind = checkpoint_buffer_kind::array;
  e.buffer.array = view;
  e.buffer.bytes = bytes;
  e.name = std::move(name);
  e.array = &a;
  buffers_.push_back(std::move(e));
  return *this;
}

checkpoint_layout checkpoint_group::layout() const {
  checkpoint_layout l;
  std::uint64_t at = 0;
  std::vector<std::uint64_t> sizes;
  for (const entry& e : buffers_) {
    l.buffer_offset.push_back(at);
    at += ckpt::align_up(e.buffer.bytes, ckpt::extent_align);
    sizes.push_back(e.buffer.bytes);
  }
  l.data_bytes = at;
  const std::uint64_t slot = ckpt::align_up(at, ckpt::slot_align);
  l.slot_offset[0] = ckpt::data_at;
  l.slot_offset[1] = ckpt::data_at + slot;
  l.file_bytes = ckpt::data_at + 2 * slot;
  l.layout_hash = hash_layout(sizes);
  return l;
}

void checkpoint_group::open(const std::string& path, const options& opts,
                            const controller_opener& open, const checkpoint_options& copts) {
  if (controller_) throw logic_error("checkpoint group " + path_ + ": open() twice", path_);
  if (buffers_.empty())
    throw invalid_argument("checkpoint group " + path + ": no buffers registered", path);
  opts_ = opts;
  opts_.writable = true;
  opts_.validate();
  copts_ = copts;
  const checkpoint_layout l = layout();
  size_file(path, l.file_bytes);
  std::shared_ptr<controller> ctl = open ? open(path, opts_) : make_controller(path, opts_);
  if (!ctl)
    throw invalid_argument("checkpoint group " + path + ": the opener returned no controller",
                           path);
  if (!ctl->file().writable())
    throw invalid_argument("checkpoint group " + path + ": the controller opened it read-only",
                           path);
  if (ctl->file().capacity_blocks() * nvme::block_size < l.file_bytes)
    throw invalid_argument("checkpoint group " + path + ": the controller sees " +
                           std::to_string(ctl->file().size_bytes()) + " bytes, the layout needs " +
                           std::to_string(l.file_bytes));
  path_ = path;

  const std::uint32_t chunk = opts_.line_size;
  std::uint64_t chunks = 0;
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    checkpoint_buffer& b = buffers_[i].buffer;
    b.slot_offset = l.buffer_offset[i];
    b.extent = ckpt::align_up(b.bytes, ckpt::extent_align);
    b.first_chunk = chunks;
    chunks += (b.extent + chunk - 1) / chunk;
  }
  std::vector<checkpoint_buffer> host(buffers_.size());
  for (std::size_t i = 0; i < buffers_.size(); ++i) host[i] = buffers_[i].buffer;
  device_buffers_ = runtime::make_device<checkpoint_buffer>(host.size(), false);
  runtime::copy_to_device(device_buffers_.get(), host.data(), host.size() * sizeof(checkpoint_buffer));

  checkpoint_control c{};
  c.next_sequence = 1;
  c.exclude_from = ~std::uint64_t{0};
  control_ = runtime::make_device<checkpoint_control>(1, false);
  runtime::copy_to_device(control_.get(), &c, sizeof c);
  record_io_ = runtime::make_device<std::byte>(3 * ckpt::record_stride);

  const std::uint64_t set_bytes = std::uint64_t{detail::checkpoint_warp_size()} * chunk;
  const std::uint64_t sets = std::clamp<std::uint64_t>(copts_.scratch_bytes / set_bytes, 2, 1024);
  scratch_ = runtime::make_device<std::byte>(sets * set_bytes, false);
  scratch_locks_ = runtime::make_device<std::uint32_t>(sets);

  ref_ = checkpoint_ref{};
  ref_.io = ctl->device_ref();
  ref_.buffers = device_buffers_.get();
  ref_.buffer_count = static_cast<std::uint32_t>(buffers_.size());
  ref_.chunk_bytes = chunk;
  ref_.total_chunks = chunks;
  ref_.data_bytes = l.data_bytes;
  ref_.slot_offsets[0] = l.slot_offset[0];
  ref_.slot_offsets[1] = l.slot_offset[1];
  ref_.layout_hash = l.layout_hash;
  ref_.timeout_ns = opts_.timeout_ns;
  ref_.control = control_.get();
  ref_.record_io = record_io_.get();
  ref_.record_bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(ckpt::record_stride, chunk));
  ref_.scratch_sets = static_cast<std::uint32_t>(sets);
  ref_.scratch = scratch_.get();
  ref_.scratch_locks = scratch_locks_.get();
  for (std::size_t i = 0; i < buffers_.size() && i < ckpt::record_sizes; ++i)
    ref_.sizes[i] = buffers_[i].buffer.bytes;
  controller_ = std::move(ctl);

  try {
    run_and_check(op_scan, 1, "reading the commit records");
  } catch (...) {
    controller_.reset();
    throw;
  }
  const checkpoint_control s = read_control();
  for (std::uint32_t k = 0; k < 2; ++k) {
    if (s.states[k] != record_state::valid) continue;
    if (s.layouts[k] == l.layout_hash && s.buffer_counts[k] == ref_.buffer_count) continue;
    if (copts_.discard_foreign) continue;
    const std::string p = path_;
    controller_.reset();
    path_.clear();
    throw checkpoint_error(
        "checkpoint file " + p + " holds checkpoint " + std::to_string(s.sequences[k]) + " of " +
            std::to_string(s.buffer_counts[k]) + " buffers in another layout than this group's " +
            std::to_string(ref_.buffer_count) +
            " buffers: not overwriting it (use another file, or "
            "checkpoint_options::discard_foreign)",
        checkpoint_phase::record_read, nvme::status::ok(),
        group_info(p, error_kind::invalid_argument));
  }
}

void checkpoint_group::require_open(const char* what) const {
  if (!controller_) throw logic_error(std::string("checkpoint group: ") + what + " before open()");
}

checkpoint_ref checkpoint_group::ref() const {
  require_open("ref()");
  return ref_;
}

checkpoint_control checkpoint_group::read_control() const {
  checkpoint_control c{};
  runtime::copy_to_host(&c, control_.get(), sizeof c);
  return c;
}

std::uint32_t checkpoint_group::default_warps() const {
  if (copts_.warps != 0) return copts_.warps;
  return detail::checkpoint_default_warps(ref_.total_chunks);
}

std::string checkpoint_group::describe_buffer(std::uint32_t b) const {
  if (b >= buffers_.size()) return "";
  const entry& e = buffers_[b];
  return "buffer '" + e.name + "' (#" + std::to_string(b) + ", " + std::to_string(e.buffer.bytes) +
         " bytes" + (e.array ? ", array over " + e.array->path() : std::string()) + ")";
}

void checkpoint_group::raise(const checkpoint_control& c, const char* what) const {
  std::string m = "checkpoint group " + path_ + ": " + what + " failed";
  const checkpoint_fault& f = c.fault;
  const nvme::status st{f.status};
  if (f.state == 2) {
    m += std::string(": ") + to_string(f.phase);
    if (f.buffer != ~0u) m += " of " + describe_buffer(f.buffer) + " at byte " + std::to_string(f.offset);
    if (f.lba != 0 || f.phase == checkpoint_phase::data_write || f.phase == checkpoint_phase::data_read ||
        f.phase == checkpoint_phase::record_write || f.phase == checkpoint_phase::record_read)
      m += ", LBA " + std::to_string(f.lba) + " (file byte " + std::to_string(f.lba * nvme::block_size) + ")";
    if (f.phase == checkpoint_phase::array_read || f.phase == checkpoint_phase::array_write) {
      if (f.buffer < buffers_.size() && buffers_[f.buffer].array != nullptr) {
        try {
          buffers_[f.buffer].array->check();
        } catch (const std::exception& e) {
          m += std::string(" (") + e.what() + ")";
        }
      }
    } else {
      m += ": " + describe(st);
    }
    if (f.count > 1) m += " (" + std::to_string(f.count) + " failures in all)";
  } else {
    m += std::string(": outcome ") + to_string(c.outcome);
  }
  try {
    controller_->check();
  } catch (const std::exception& e) {
    m += std::string("; controller: ") + e.what();
  }
  error_info info = group_info(path_);
  if (f.state == 2) {
    info.count = f.count;
    if (f.lba != 0 || f.phase == checkpoint_phase::data_write ||
        f.phase == checkpoint_phase::data_read || f.phase == checkpoint_phase::record_write ||
        f.phase == checkpoint_phase::record_read) {
      info.lba = f.lba;
      info.offset = f.lba * nvme::block_size;
    }
  }
  throw checkpoint_error(m, f.state == 2 ? f.phase : checkpoint_phase::none, st, std::move(info));
}

checkpoint_outcome checkpoint_group::run_and_check(int op, std::uint32_t warps, const char* what) {
  detail::run_checkpoint_op(ref_, op, warps);
  return finish_named(what);
}

checkpoint_outcome checkpoint_group::finish() { return finish_named("device-side operation"); }

checkpoint_outcome checkpoint_group::finish_named(const char* what) {
  require_open("finish()");
  checkpoint_control c = read_control();
  if (c.operations == seen_operations_)
    throw checkpoint_error("checkpoint group " + path_ + ": " + what +
                               " did not finish (did every warp 0..warps-1 call it exactly once?)",
                           checkpoint_phase::none, nvme::status::ok(),
                           group_info(path_, error_kind::invalid_state));
  seen_operations_ = c.operations;
  if (c.fault.state != 0 || c.outcome == checkpoint_outcome::failed) {
    // Clear the fault for the next operation, then raise it.
    checkpoint_fault none{};
    runtime::copy_to_device(&control_->fault, &none, sizeof none);
    raise(c, what);
  }
  if (c.outcome == checkpoint_outcome::committed && ref_.io.kind == io_kind::memory)
    controller_->make_durable();  // the device FLUSH reached pinned memory only
  return c.outcome;
}

std::uint64_t checkpoint_group::checkpoint() {
  require_open("checkpoint()");
  const checkpoint_outcome o = run_and_check(op_checkpoint, default_warps(), "checkpoint");
  if (o != checkpoint_outcome::committed)
    throw checkpoint_error("checkpoint group " + path_ + ": checkpoint ended " + to_string(o),
                           checkpoint_phase::none, nvme::status::ok(), group_info(path_));
  return read_control().outcome_sequence;
}

restore_result checkpoint_group::restore() {
  require_open("restore()");
  for (const entry& e : buffers_)
    if (e.array != nullptr && !e.array->writable())
      throw invalid_argument("checkpoint group " + path_ + ": cannot restore " +
                             describe_buffer(static_cast<std::uint32_t>(&e - buffers_.data())) +
                             ": the array is read-only (options::writable)");
  restore_result r;
  std::string skipped;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const checkpoint_outcome o = run_and_check(op_restore, default_warps(), "restore");
    const checkpoint_control c = read_control();
    switch (o) {
      case checkpoint_outcome::restored:
        for (entry& e : buffers_)
          if (e.array != nullptr) e.array->flush();
        r.outcome = o;
        r.sequence = c.outcome_sequence;
        return r;
      case checkpoint_outcome::data_mismatch:
        ++r.skipped;
        skipped += (skipped.empty() ? "" : ", ") + std::string("checkpoint ") +
                   std::to_string(c.outcome_sequence) + " (data sums to " +
                   std::to_string(c.found_checksum) + ", its record says " +
                   std::to_string(c.restore_checksum) + ")";
        continue;
      case checkpoint_outcome::empty:
        if (r.skipped != 0)
          throw checkpoint_error("checkpoint group " + path_ + ": no checkpoint's data verifies: " +
                                     skipped + "; the buffers hold unverified bytes",
                                 checkpoint_phase::data_read, nvme::status::ok(),
                                 group_info(path_, error_kind::corrupt));
        r.outcome = o;
        return r;
      case checkpoint_outcome::layout_mismatch: {
        const std::uint32_t s = c.restore_slot;
        throw checkpoint_error("checkpoint group " + path_ + ": checkpoint " +
                                   std::to_string(c.restore_sequence) + " holds " +
                                   std::to_string(c.buffer_counts[s]) +
                                   " buffers in another layout than this group's " +
                                   std::to_string(ref_.buffer_count) + "; nothing restored",
                               checkpoint_phase::record_read, nvme::status::ok(),
                               group_info(path_, error_kind::invalid_argument));
      }
      default:
        throw checkpoint_error("checkpoint group " + path_ + ": restore ended " + to_string(o),
                               checkpoint_phase::none, nvme::status::ok(), group_info(path_));
    }
  }
  throw checkpoint_error(
      "checkpoint group " + path_ + ": no checkpoint's data verifies: " + skipped,
      checkpoint_phase::data_read, nvme::status::ok(), group_info(path_, error_kind::corrupt));
}

std::uint64_t checkpoint_group::latest_sequence() const {
  require_open("latest_sequence()");
  return read_control().next_sequence - 1;
}

std::uint64_t checkpoint_group::next_sequence() const {
  require_open("next_sequence()");
  return read_control().next_sequence;
}

}  // namespace warpstore
