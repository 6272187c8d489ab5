// The NVMe side of a service thread: fetching SQEs at the tail doorbell,
// checking each command (namespace, opcode, LBA range, data pointer,
// O_DIRECT alignment), FLUSH ordering behind earlier WRITEs, and posting
// completions into the CQs as far as the GPU has retired them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "controller/service_common.h"
#include "controller/service_thread.h"

namespace warpstore {

using host_detail::generic_status;
using host_detail::steady_ns;

namespace {

// FLUSH may name every namespace at once.
constexpr std::uint32_t nsid_all = 0xFFFFFFFFu;
// The only namespace a warpstore controller exposes.
constexpr std::uint32_t nsid_one = 1;

// Dword 3 (cid, phase, status) as the one 32-bit word both sides access
// atomically; the controller never touches its 16-bit halves.
inline std::uint32_t& completion_dw3_word(nvme::completion& e) {
  return *reinterpret_cast<std::uint32_t*>(reinterpret_cast<unsigned char*>(&e) +
                                           offsetof(nvme::completion, cid));
}

}  // namespace

bool host_controller::worker::read_doorbell(queue_ctx& q, std::uint32_t* doorbell,
                                             const char* queue, const char* which,
                                             std::uint32_t& value) {
  value = detail::system_atomic<std::uint32_t>(*doorbell)
              .load(detail::memory_order_acquire);
  if (value <= q.mask) return true;
  if (!q.doorbell_fault) {
    q.doorbell_fault = true;
    owner_.record_failure("host controller: " + std::string(queue) + " " +
                          std::to_string(q.ref.qid) + " " + which + " doorbell holds " +
                          std::to_string(value) + ", beyond depth " + std::to_string(q.mask + 1));
  }
  return false;
}

// Copies every new SQE of every owned queue and starts it.
bool host_controller::worker::fetch() {
  bool any = false;
  const std::size_t n = queues_.size();
  for (std::size_t k = 0; k < n; ++k) {
    queue_ctx& q = queues_[(next_queue_ + k) % n];
    std::uint32_t tail = 0;
    if (!read_doorbell(q, q.ref.sq_tail_doorbell, "SQ", "tail", tail)) continue;
    std::uint32_t available = (tail - q.sq_head) & q.mask;
    if (available == 0) continue;
    if (tail != q.last_tail) {
      q.last_tail = tail;
      ++n_doorbells_;
    }
    // Stop when contexts or io_uring slots run out; the rest waits in the SQ.
    while (available > 0 && !q.free.empty() &&
           inflight_ + upload_batch_.size() + parked_.size() < max_inflight_) {
      command_ctx& c = q.contexts[q.free.back()];
      q.free.pop_back();
      std::memcpy(&c.cmd, q.ref.sq + q.sq_head, sizeof(nvme::command));
      q.sq_head = (q.sq_head + 1) & q.mask;
      --available;
      any = true;
      start(q, c);
    }
  }
  next_queue_ = n == 0 ? 0 : static_cast<std::uint32_t>((next_queue_ + 1) % n);
  flush_uploads();
  return any;
}

// Validates a fetched command and either queues its read or completes it.
void host_controller::worker::start(queue_ctx& q, command_ctx& c) {
  const nvme::command& cmd = c.cmd;
  c.dw0 = 0;
  c.length = 0;
  c.offset = 0;
  c.done = 0;
  c.fault = {};
  c.write_hooked = false;
  c.alone = false;
  const auto op = static_cast<nvme::opcode>(cmd.opc);
  if (cmd.nsid != nsid_one && !(op == nvme::opcode::flush && cmd.nsid == nsid_all))
    return complete(c, generic_status(nvme::sc::invalid_namespace));
  // Fused operations and SGL data pointers are not supported.
  if (cmd.flags != 0) return complete(c, generic_status(nvme::sc::invalid_field));
  c.op = op;
  switch (op) {
    case nvme::opcode::flush:
      // A read-only file has nothing to make durable.
      if (!writable_) return complete(c, nvme::status::ok());
      if (faults_ != nullptr && faults_->covers(op) && inject_fault(c)) return;
      return start_flush(q, c);
    case nvme::opcode::read:
      break;
    case nvme::opcode::write:
      if (!writable_) return complete(c, generic_status(nvme::sc::namespace_write_protected));
      break;
    default:
      return complete(c, generic_status(nvme::sc::invalid_opcode));
  }

  const std::uint32_t blocks = cmd.nlb();
  const std::uint64_t length = std::uint64_t{blocks} << nvme::block_shift;
  if (length > slot_bytes_) return complete(c, generic_status(nvme::sc::invalid_field));
  const std::uint64_t slba = cmd.slba();
  if (slba >= capacity_blocks_ || blocks > capacity_blocks_ - slba)
    return complete(c, generic_status(nvme::sc::lba_out_of_range));

  if (gpu_pull_) {
    // The data must sit in the command's own staging slot: anything else
    // would let one command overwrite (or write out) another's bytes.
    if (cmd.cid > q.mask || cmd.prp1 != reinterpret_cast<std::uint64_t>(
                                            q.ref.staging + std::size_t{cmd.cid} * slot_bytes_))
      return complete(c, generic_status(nvme::sc::invalid_field));
    c.buffer = q.ref.staging + std::size_t{cmd.cid} * slot_bytes_;
  } else {
    if (cmd.prp1 == 0) return complete(c, generic_status(nvme::sc::invalid_field));
    c.buffer = q.read_base + std::size_t{c.index} * slot_bytes_;
  }

  c.offset = slba << nvme::block_shift;
  c.length = static_cast<std::uint32_t>(length);
  // slba < capacity, so the first byte exists; the tail may not.
  c.file_bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(length, file_size_ - c.offset));
  c.request_bytes = c.file_bytes;
  c.buffered_fd = false;
  if (direct_ && op == nvme::opcode::write) {
    // A WRITE never grows the file: the bytes of the last block past its
    // end are dropped. An unaligned tail goes through the buffered fd.
    const std::uint64_t a = direct_alignment_ - 1;
    const bool ends_namespace = slba + blocks == capacity_blocks_;
    if (((c.offset | reinterpret_cast<std::uintptr_t>(c.buffer)) & a) != 0 ||
        ((length & a) != 0 && !ends_namespace))
      return complete(c, generic_status(nvme::sc::invalid_field));
    c.buffered_fd = (c.file_bytes & a) != 0;
  } else if (direct_) {
    // O_DIRECT needs aligned offsets, buffers and lengths. A command that
    // ends the namespace may have an unaligned length: it is read rounded up
    // (the kernel stops at EOF) as long as that fits in the slot.
    const std::uint64_t a = direct_alignment_ - 1;
    c.request_bytes = static_cast<std::uint32_t>((c.file_bytes + a) & ~a);
    const bool ends_namespace = slba + blocks == capacity_blocks_;
    if (((c.offset | reinterpret_cast<std::uintptr_t>(c.buffer)) & a) != 0 ||
        ((length & a) != 0 && !ends_namespace) || c.request_bytes > slot_bytes_)
      return complete(c, generic_status(nvme::sc::invalid_field));
  }
  c.done = 0;
  // Faults are injected into the commands the policy covers (reads, unless
  // it models durability too).
  if (op == nvme::opcode::read && faults_ != nullptr && faults_->covers(op) && inject_fault(c))
    return;
  if (op == nvme::opcode::write) {
    c.generation = q.generation;
    ++q.generation_writes[c.generation & q.mask];
    if (faults_ != nullptr) {
      if (faults_->covers(op) && inject_fault(c)) return;
      faults_->write_starting(c.offset, c.file_bytes);
      c.write_hooked = true;
    }
    if (!gpu_pull_) {
      // The bytes are in GPU memory at PRP1: copy them into our buffer first.
      copies_->enqueue_to_host(c.buffer, reinterpret_cast<const void*>(cmd.prp1), c.length);
      upload_batch_.push_back(&c);
      return;
    }
  }
  queue_io(c);
}

// A FLUSH completes only after every WRITE fetched before it: it waits in its
// queue's line until the writes of its generation (and, by the order of the
// line, every earlier one) are done.
void host_controller::worker::start_flush(queue_ctx& q, command_ctx& c) {
  c.generation = q.generation++;
  q.flushes[(q.flush_head + q.flush_count) & q.mask] = c.index;
  ++q.flush_count;
  start_flushes(q);
}

void host_controller::worker::start_flushes(queue_ctx& q) {
  while (q.flush_count > 0 && inflight_ < max_inflight_) {
    command_ctx& f = q.contexts[q.flushes[q.flush_head]];
    if (q.generation_writes[f.generation & q.mask] != 0) return;
    q.flush_head = (q.flush_head + 1) & q.mask;
    --q.flush_count;
    io_uring_sqe* sqe = next_sqe();
    if (faults_ != nullptr) f.flush_ticket = faults_->flush_starting();
    f.sync_started = steady_ns();
    io_uring_prep_fsync(sqe, registered_file_ ? 0 : file_.fd(), IORING_FSYNC_DATASYNC);
    if (registered_file_) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, &f);
    ++inflight_;
    ++unsubmitted_;
  }
}

// A WRITE is done (well or not): posts it and lets waiting flushes go.
void host_controller::worker::write_done(command_ctx& c, nvme::status st, std::uint32_t dw0) {
  queue_ctx& q = queues_[c.queue];
  --q.generation_writes[c.generation & q.mask];
  if (c.write_hooked) faults_->write_finished(c.offset, c.file_bytes);
  c.write_hooked = false;
  complete(c, st, dw0);
  start_flushes(q);
}

void host_controller::worker::complete(command_ctx& c, nvme::status st, std::uint32_t dw0) {
  c.status = st;
  c.dw0 = dw0;
  if (c.fault.hold_ns != 0)
    return held_.hold(c.queue, c.index, steady_ns() + std::exchange(c.fault.hold_ns, 0));
  enqueue_post(c);
}

void host_controller::worker::enqueue_post(command_ctx& c) {
  queue_ctx& q = queues_[c.queue];
  q.pending[(q.pending_head + q.pending_count) & q.mask] = c.index;
  ++q.pending_count;
}

// Posts pending completions as far as each CQ has room. Never overwrites an
// entry the GPU has not retired (head from the CQ head doorbell).
bool host_controller::worker::post() {
  bool any = false;
  for (queue_ctx& q : queues_) {
    if (q.pending_count == 0) continue;
    std::uint32_t head = 0;
    if (!read_doorbell(q, q.ref.cq_head_doorbell, "CQ", "head", head)) continue;
    const std::uint32_t used = (q.cq_tail - head) & q.mask;
    std::uint32_t room = q.mask - used;  // one entry always stays empty
    while (room > 0 && q.pending_count > 0) {
      command_ctx& c = q.contexts[q.pending[q.pending_head]];
      q.pending_head = (q.pending_head + 1) & q.mask;
      --q.pending_count;
      --room;

      nvme::completion& e = q.ref.cq[q.cq_tail];
      // Relaxed word stores: a retirer may read the entry (dwords 2 and 3 in
      // one load) while it is rewritten; dword 3, stored last with release,
      // says when the rest is valid.
      auto* words = reinterpret_cast<std::uint32_t*>(&e);
      detail::system_atomic<std::uint32_t>(words[0]).store(c.dw0, detail::memory_order_relaxed);
      detail::system_atomic<std::uint32_t>(words[1]).store(0, detail::memory_order_relaxed);
      detail::system_atomic<std::uint32_t>(words[2]).store(
          (q.sq_head & 0xFFFFu) | (static_cast<std::uint32_t>(q.ref.qid) << 16),
          detail::memory_order_relaxed);
      detail::system_atomic<std::uint32_t>(completion_dw3_word(e))
          .store(nvme::completion_dw3(c.cmd.cid, c.status, q.phase), detail::memory_order_release);
      q.cq_tail = (q.cq_tail + 1) & q.mask;
      if (q.cq_tail == 0) q.phase = !q.phase;

      ++n_commands_;
      if (c.status.success())
        n_bytes_ += c.length;
      else
        ++n_errors_;
      q.free.push_back(c.index);
      any = true;
    }
  }
  return any;
}

}  // namespace warpstore
