// The io_uring engine of a service thread: preparing reads, writes and
// fdatasyncs, one submit per round, reaping results, resubmitting short
// transfers, zero-filling past EOF, turning errors into media statuses, and
// the copy_engine batches between host staging and GPU memory.
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "controller/service_common.h"
#include "controller/service_thread.h"

namespace warpstore {

using host_detail::errno_text;
using host_detail::generic_status;
using host_detail::reap_batch;
using host_detail::steady_ns;

// copy_engine WRITEs: one wait for every upload fetched this round, then
// their writes go to the io_uring.
void host_controller::worker::flush_uploads() {
  if (upload_batch_.empty()) return;
  bool copied = true;
  try {
    copies_->wait();
  } catch (const std::exception& e) {
    owner_.record_io_error(std::string("copy engine wait (GPU to host, for writes) failed: ") +
                           e.what());
    copied = false;
  }
  for (command_ctx* c : upload_batch_) {
    if (copied)
      queue_io(*c);
    else
      write_done(*c, generic_status(nvme::sc::data_transfer_error));
  }
  upload_batch_.clear();
}

io_uring_sqe* host_controller::worker::next_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    // Cannot happen while inflight_ <= ring entries; submitting frees room.
    io_uring_submit(&ring_);
    unsubmitted_ = 0;
    sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr)
      throw runtime_error("host controller: io_uring submission queue full with " +
                          std::to_string(inflight_) + " reads in flight");
  }
  return sqe;
}

void host_controller::worker::queue_io(command_ctx& c) {
  if (combiner_ != nullptr && c.op == nvme::opcode::write) {
    ++combining_;
    to_combine_.push_back(
        {this, &c, c.offset + c.done, c.buffer + c.done, c.request_bytes - c.done, 0});
    return;
  }
  // A whole line inside the file, read for the first time, with nothing
  // injected: its extent may be read ahead (try_read_ahead), or it may go
  // out with its neighbours (prep_reads).
  if (c.op == nvme::opcode::read && c.done == 0 && !c.alone &&
      c.fault.kind == fault_kind::none && c.file_bytes == c.length &&
      c.request_bytes == c.length && !c.buffered_fd) {
    if (read_ahead_ != nullptr && try_read_ahead(c)) return;
    if (combine_reads_) {
      to_read_.push_back(&c);
      return;
    }
  }
  prep_io(c);
}

// The line of c alone (a read-ahead that does not serve it).
void host_controller::worker::queue_line(command_ctx& c) {
  if (combine_reads_)
    to_read_.push_back(&c);
  else
    prep_io(c);
}

// Whether read-ahead took c: served from an extent (completed), or parked
// until its extent is read (by this unit, which starts the read now, or
// another).
bool host_controller::worker::try_read_ahead(command_ctx& c) {
  if (!read_ahead_->covers(c.offset, c.length)) return false;
  host_detail::read_ahead::load l;
  switch (read_ahead_->serve(c.offset, c.length, c.buffer, l)) {
    case host_detail::read_ahead::verdict::copied:
      on_result(c, static_cast<int>(c.length));
      return true;
    case host_detail::read_ahead::verdict::line:
      return false;
    case host_detail::read_ahead::verdict::load:
      read_extent(l);
      break;
    case host_detail::read_ahead::verdict::wait:
      break;
  }
  parked_.push_back({&c, steady_ns(), l.slot});
  return true;
}

// Starts the read of an extent (O_DIRECT, into read-ahead's memory).
void host_controller::worker::read_extent(const host_detail::read_ahead::load& l) {
  io_uring_sqe* sqe = next_sqe();
  const bool fixed_file = registered_file_;
  io_uring_prep_read(sqe, fixed_file ? 0 : file_.fd(), l.buffer, l.bytes, l.offset);
  if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
  sqe->user_data = (std::uint64_t{l.slot} << 2) | 2u;
  ++inflight_;
  ++unsubmitted_;
}

// The parked READs whose extents were read (or given up on) go on: served
// from the extent, or read alone. Those still waiting stay, up to
// park_limit_ns.
bool host_controller::worker::serve_parked() {
  if (parked_.empty()) return false;
  const std::uint64_t now = steady_ns();
  std::size_t kept = 0;
  bool any = false;
  for (std::size_t i = 0; i < parked_.size(); ++i) {
    command_ctx& c = *parked_[i].c;
    const bool late = now - parked_[i].since > park_limit_ns;
    // Still being read: no lock taken (units poll their parked reads every
    // round, and each serve() takes read-ahead's one lock).
    if (!late && read_ahead_->loading(parked_[i].slot)) {
      parked_[kept++] = parked_[i];
      continue;
    }
    host_detail::read_ahead::load l;
    const auto v = late
                       ? host_detail::read_ahead::verdict::line
                       : read_ahead_->serve(c.offset, c.length, c.buffer, l);
    if (v == host_detail::read_ahead::verdict::wait) {
      parked_[kept++] = {&c, parked_[i].since, l.slot};
      continue;
    }
    any = true;
    if (v == host_detail::read_ahead::verdict::copied) {
      on_result(c, static_cast<int>(c.length));
    } else if (v == host_detail::read_ahead::verdict::line) {
      queue_line(c);
    } else {  // load: its extent was dropped meanwhile and is read again
      read_extent(l);
      parked_[kept++] = {&c, parked_[i].since, l.slot};
    }
  }
  parked_.resize(kept);
  if (any) flush_copies();
  return any;
}

void host_controller::worker::prep_io(command_ctx& c) {
  io_uring_sqe* sqe = next_sqe();
  std::byte* buf = c.buffer + c.done;
  const unsigned len = c.request_bytes - c.done;
  const std::uint64_t off = c.offset + c.done;
  const bool fixed_file = registered_file_ && !c.buffered_fd;
  const int fd = fixed_file ? 0 : c.buffered_fd ? file_.buffered_fd() : file_.fd();
  const auto buf_index = static_cast<int>(c.queue);
  if (c.op == nvme::opcode::write) {
    if (registered_buffers_)
      io_uring_prep_write_fixed(sqe, fd, buf, len, off, buf_index);
    else
      io_uring_prep_write(sqe, fd, buf, len, off);
  } else if (registered_buffers_) {
    io_uring_prep_read_fixed(sqe, fd, buf, len, off, buf_index);
  } else {
    io_uring_prep_read(sqe, fd, buf, len, off);
  }
  if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, &c);
  ++inflight_;
  ++unsubmitted_;
}

// This round's whole-line READs, sorted by offset: each run of neighbours
// (at most max_run_commands, max_run_bytes) goes out as one readv into the
// commands' own buffers; a command without neighbours as a plain read.
void host_controller::worker::prep_reads() {
  std::sort(to_read_.begin(), to_read_.end(),
            [](const command_ctx* a, const command_ctx* b) { return a->offset < b->offset; });
  const bool fixed_file = registered_file_;
  const int fd = fixed_file ? 0 : file_.fd();
  for (std::size_t i = 0; i < to_read_.size();) {
    std::size_t j = i + 1;
    std::uint64_t bytes = to_read_[i]->length;
    while (j < to_read_.size() && j - i < max_run_commands &&
           to_read_[j]->offset == to_read_[j - 1]->offset + to_read_[j - 1]->length &&
           bytes + to_read_[j]->length <= max_run_bytes) {
      bytes += to_read_[j]->length;
      ++j;
    }
    if (j - i == 1) {
      prep_io(*to_read_[i]);
      i = j;
      continue;
    }
    if (free_runs_.empty()) {
      free_runs_.push_back(static_cast<std::uint32_t>(runs_.size()));
      runs_.emplace_back();
    }
    const std::uint32_t r = free_runs_.back();
    free_runs_.pop_back();
    read_run& run = runs_[r];
    run.members.assign(to_read_.begin() + static_cast<std::ptrdiff_t>(i),
                       to_read_.begin() + static_cast<std::ptrdiff_t>(j));
    run.iov.clear();
    for (command_ctx* c : run.members) run.iov.push_back(iovec{c->buffer, c->length});
    io_uring_sqe* sqe = next_sqe();
    io_uring_prep_readv(sqe, fd, run.iov.data(), static_cast<unsigned>(run.iov.size()),
                        run.members.front()->offset);
    if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
    sqe->user_data = (std::uint64_t{r} << 1) | 1u;
    ++inflight_;
    ++unsubmitted_;
    owner_.counters_.combined_reads.fetch_add(j - i, std::memory_order_relaxed);
    owner_.counters_.read_runs.fetch_add(1, std::memory_order_relaxed);
    i = j;
  }
  to_read_.clear();
}

// A run's readv finished with `res`: each member gets its share of the bytes
// in file order. An error goes to every member (EAGAIN: each tries again); a
// member the bytes fell short of goes again alone.
void host_controller::worker::on_run_result(std::uintptr_t user_data, int res) {
  const auto r = static_cast<std::uint32_t>(user_data >> 1);
  read_run& run = runs_[r];
  std::uint64_t left = res > 0 ? static_cast<std::uint64_t>(res) : 0;
  for (command_ctx* c : run.members) {
    if (res < 0) {
      on_result(*c, res);
      continue;
    }
    const auto share = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, c->request_bytes));
    left -= share;
    if (share == 0) {
      c->alone = true;
      queue_io(*c);
    } else {
      on_result(*c, static_cast<int>(share));
    }
  }
  run.members.clear();
  free_runs_.push_back(r);
}

bool host_controller::worker::submit() {
  if (!to_combine_.empty()) {
    combiner_->push(to_combine_);
    to_combine_.clear();
  }
  if (!to_read_.empty()) prep_reads();
  if (unsubmitted_ == 0) return false;
  const int ret = io_uring_submit(&ring_);
  if (ret >= 0) {
    unsubmitted_ -= std::min<std::uint32_t>(unsubmitted_, static_cast<std::uint32_t>(ret));
    return true;
  }
  // Transient (no memory for requests, completion ring busy, signal): the
  // SQEs stay in the ring and go with the next round's submit.
  if (ret == -EAGAIN || ret == -EBUSY || ret == -EINTR) return false;
  throw runtime_error("host controller: io_uring_submit failed: " + errno_text(-ret));
}

bool host_controller::worker::reap() {
  io_uring_cqe* cqes[reap_batch];
  bool any = false;
  for (;;) {
    const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, reap_batch);
    if (n == 0) break;
    any = true;
    for (unsigned i = 0; i < n; ++i) {
      // Older kernels implement wait timeouts with an internal timeout SQE.
      if (cqes[i]->user_data == LIBURING_UDATA_TIMEOUT) continue;
      const int res = cqes[i]->res;
      --inflight_;
      if ((cqes[i]->user_data & 1u) != 0) {
        on_run_result(static_cast<std::uintptr_t>(cqes[i]->user_data), res);
        continue;
      }
      if ((cqes[i]->user_data & 2u) != 0) {  // an extent read ahead
        read_ahead_->loaded(static_cast<std::uint32_t>(cqes[i]->user_data >> 2), res);
        continue;
      }
      auto* c = static_cast<command_ctx*>(io_uring_cqe_get_data(cqes[i]));
      on_result(*c, res);
    }
    io_uring_cq_advance(&ring_, n);
  }
  flush_copies();
  for (queue_ctx& q : queues_)
    if (q.flush_count > 0) start_flushes(q);
  return any;
}

void host_controller::worker::on_result(command_ctx& c, int res) {
  if (c.op == nvme::opcode::flush) {
    owner_.counters_.sync_ns.fetch_add(steady_ns() - c.sync_started, std::memory_order_relaxed);
    if (res < 0) return fail_io(c, -res, "failed");
    if (faults_ != nullptr && !faults_->flush_finished(c.flush_ticket))
      return fail_io(c, EIO, "lost (power cut)");
    return complete(c, nvme::status::ok());
  }
  if (res > 0 && c.fault.kind != fault_kind::none)
    res = static_cast<int>(faults_->on_data(c.fault, static_cast<std::uint32_t>(res),
                                            c.request_bytes, c.done == 0));
  if (res < 0) {
    if (res == -EAGAIN || res == -EINTR) return queue_io(c);
    return fail_io(c, -res, "failed");
  }
  if (res == 0 && c.done < c.file_bytes)
    return fail_io(c, EIO, c.op == nvme::opcode::write ? "wrote nothing"
                                                       : "hit end of file early (file shrank?)");
  c.done += static_cast<std::uint32_t>(res);
  if (c.done < c.file_bytes) {
    // A short transfer: ask for the rest. O_DIRECT can only continue from an
    // aligned point.
    if (direct_ && !c.buffered_fd && (c.done & (direct_alignment_ - 1)) != 0)
      return fail_io(c, EIO, "returned an unaligned short count under O_DIRECT");
    return queue_io(c);
  }
  if (c.op == nvme::opcode::write) return write_done(c, nvme::status::ok());
  // Blocks past the end of the file read as zeros.
  if (c.file_bytes < c.length) std::memset(c.buffer + c.file_bytes, 0, c.length - c.file_bytes);
  if (gpu_pull_) return complete(c, nvme::status::ok());
  copy_batch_.push_back(&c);
}

void host_controller::worker::fail_io(command_ctx& c, int err, const char* what) {
  const char* name = c.op == nvme::opcode::write   ? "write"
                     : c.op == nvme::opcode::flush ? "flush (fdatasync)"
                                                   : "read";
  owner_.record_io_error(std::string(name) + " of " + std::to_string(c.length) +
                         " bytes at offset " + std::to_string(c.offset + c.done) + " of '" +
                         file_.path() + "' " + what + ": " + errno_text(err));
  const auto dw0 = static_cast<std::uint32_t>(err);
  if (c.op == nvme::opcode::read)
    return complete(c, nvme::status::make(nvme::status_type::media, nvme::sc::unrecovered_read),
                    dw0);
  const nvme::status fault = nvme::status::make(nvme::status_type::media, nvme::sc::write_fault);
  if (c.op == nvme::opcode::write) return write_done(c, fault, dw0);
  complete(c, fault, dw0);
}

// copy_engine: push every finished read of this round into GPU memory as
// one launch; their completions go out once it is done (finish_copies),
// while this thread goes on with the next reads.
void host_controller::worker::flush_copies() {
  if (copy_batch_.empty()) return;
  const nvme::status transfer_error = generic_status(nvme::sc::data_transfer_error);
  std::size_t enqueued = 0;
  for (command_ctx* c : copy_batch_) {
    try {
      copies_->enqueue_to_device(reinterpret_cast<void*>(c->cmd.prp1), c->buffer, c->length);
      copy_batch_[enqueued++] = c;
    } catch (const std::exception& e) {
      char prp1[24];
      std::snprintf(prp1, sizeof prp1, "0x%llx", static_cast<unsigned long long>(c->cmd.prp1));
      owner_.record_io_error("copy of " + std::to_string(c->length) + " bytes to PRP1 " + prp1 +
                             " failed: " + e.what());
      complete(*c, transfer_error);
    }
  }
  copy_batch_.resize(enqueued);
  std::uint64_t mark = 0;
  try {
    mark = copies_->launch();
  } catch (const std::exception& e) {
    owner_.record_io_error(std::string("copy engine launch failed: ") + e.what());
    for (command_ctx* c : copy_batch_) complete(*c, transfer_error);
    copy_batch_.clear();
    return;
  }
  if (!copy_batch_.empty()) {
    copying_.insert(copying_.end(), copy_batch_.begin(), copy_batch_.end());
    flights_.push_back({mark, static_cast<std::uint32_t>(copy_batch_.size())});
  }
  copy_batch_.clear();
}

// copy_engine: completes the reads of every launch that finished, in order.
bool host_controller::worker::finish_copies() {
  bool any = false;
  while (flights_head_ < flights_.size()) {
    const copy_flight f = flights_[flights_head_];
    bool copied = true;
    try {
      if (!copies_->done(f.mark)) break;
    } catch (const std::exception& e) {
      owner_.record_io_error(std::string("copy engine failed: ") + e.what());
      copied = false;
    }
    const nvme::status st =
        copied ? nvme::status::ok() : generic_status(nvme::sc::data_transfer_error);
    for (std::uint32_t i = 0; i < f.count; ++i) complete(*copying_[copying_head_ + i], st);
    copying_head_ += f.count;
    ++flights_head_;
    any = true;
  }
  if (flights_head_ == flights_.size() || copying_head_ > copying_.size() / 2) {
    // Drop what is done from the front (nothing reallocates).
    copying_.erase(copying_.begin(), copying_.begin() + static_cast<std::ptrdiff_t>(copying_head_));
    flights_.erase(flights_.begin(), flights_.begin() + static_cast<std::ptrdiff_t>(flights_head_));
    flights_head_ = copying_head_ = 0;
  }
  return any;
}

}  // namespace warpstore
