// The software NVMe controller (nvme_model.h): the register file, the
// enable / disable / shutdown state machine, the NVM commands, PRP walking
// and completion posting, run by one device thread (admin commands:
// nvme_model_admin.cpp).
#include "controller/nvme_model.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

#include "controller/nvme_model_engine.h"
#include "warpstore/error.h"

namespace warpstore::nvme_model {

using namespace detail;


std::uint32_t read32(const std::byte* bar, std::uint32_t offset) {
  return std::atomic_ref<const std::uint32_t>(*reinterpret_cast<const std::uint32_t*>(bar + offset))
      .load(std::memory_order_acquire);
}
std::uint64_t read64(const std::byte* bar, std::uint32_t offset) {
  return std::atomic_ref<const std::uint64_t>(*reinterpret_cast<const std::uint64_t*>(bar + offset))
      .load(std::memory_order_acquire);
}
void write32(std::byte* bar, std::uint32_t offset, std::uint32_t value) {
  std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(bar + offset))
      .store(value, std::memory_order_release);
}
void write64(std::byte* bar, std::uint32_t offset, std::uint64_t value) {
  std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(bar + offset))
      .store(value, std::memory_order_release);
}

void device::free_bar::operator()(std::byte* p) const {
  std::free(p);
}


device::device(config cfg) : cfg_(std::move(cfg)), st_(std::make_unique<state>()) {
  if (cfg_.max_queue_entries < 2 || cfg_.max_queue_entries > 65536)
    throw invalid_argument("nvme model: max_queue_entries " +
                           std::to_string(cfg_.max_queue_entries) + " outside 2..65536");
  if (cfg_.max_io_queues == 0 || cfg_.max_io_queues > 65534)
    throw invalid_argument("nvme model: max_io_queues " + std::to_string(cfg_.max_io_queues) +
                           " outside 1..65534");
  if (cfg_.dstrd > 15) throw invalid_argument("nvme model: dstrd beyond 15");
  if (cfg_.mdts > 15) throw invalid_argument("nvme model: mdts beyond 15 (2^15 pages)");
  const std::uint64_t doorbell_end =
      std::uint64_t{cq_head_doorbell(cfg_.max_io_queues, cfg_.dstrd)} + 4;
  bar_bytes_ = std::max<std::uint64_t>(16384, (doorbell_end + page - 1) / page * page);
  if (bar_bytes_ > (std::uint64_t{1} << 30))
    throw invalid_argument("nvme model: doorbells of " + std::to_string(cfg_.max_io_queues) +
                           " queues at stride " + std::to_string(4u << cfg_.dstrd) +
                           " need a BAR over 1 GiB");
  bar_.reset(static_cast<std::byte*>(std::aligned_alloc(page, bar_bytes_)));
  if (!bar_) throw runtime_error("nvme model: cannot allocate the register file");
  std::memset(bar_.get(), 0, bar_bytes_);

  fd_ = ::open(cfg_.path.c_str(), (cfg_.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (fd_ < 0) throw file_error(errno, "nvme model: cannot open the backing file", cfg_.path);
  struct stat sb {};
  if (::fstat(fd_, &sb) != 0) {
    const int err = errno;
    ::close(fd_);
    throw file_error(err, "nvme model: cannot stat the backing file", cfg_.path);
  }
  // A partial last block counts (as the host controller's namespace does):
  // past the end of the file it reads as zeros and its writes stop there.
  file_bytes_ = static_cast<std::uint64_t>(sb.st_size);
  if (S_ISBLK(sb.st_mode) && ::ioctl(fd_, BLKGETSIZE64, &file_bytes_) != 0) {
    const int err = errno;
    ::close(fd_);
    throw file_error(err, "nvme model: cannot size the block device", cfg_.path);
  }
  blocks_ = (file_bytes_ + nvme::block_size - 1) >> nvme::block_shift;

  // CAP: MQES 15:0, CQR 16 (contiguous queues required), TO 31:24, DSTRD
  // 35:32, CSS 44:37 (bit 37: the NVM command set), MPSMIN 51:48 and
  // MPSMAX 55:52 both 0 (4 KiB pages only).
  const std::uint64_t cap = std::uint64_t{cfg_.max_queue_entries - 1} | (std::uint64_t{1} << 16) |
                            (std::uint64_t{cfg_.timeout_500ms} << 24) |
                            (std::uint64_t{cfg_.dstrd} << 32) | (std::uint64_t{1} << 37);
  write64(bar_.get(), reg::cap, cap);
  write32(bar_.get(), reg::vs, 0x00010400u);  // 1.4.0
  st_->sqs.resize(std::size_t{cfg_.max_io_queues} + 1);
  st_->cqs.resize(std::size_t{cfg_.max_io_queues} + 1);
  st_->identify.resize(page);
  thread_ = std::thread([this] { run(); });
}

device::~device() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

void device::inject(const faults& f) {
  std::lock_guard lock(faults_mutex_);
  faults_ = f;
}

faults device::pending_faults() const {
  std::lock_guard lock(faults_mutex_);
  return faults_;
}

stats device::counters() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

// ---- the device thread --------------------------------------------------------

namespace detail {


bool engine::round() {
  const std::uint32_t cc = read32(bar(), reg::cc);
  const bool en = (cc & cc::en) != 0;
  const std::uint64_t now = now_ns();
  switch (st_.phase) {
    case phase_of_enable::disabled:
      return en ? enable() : false;
    case phase_of_enable::enabling:
      if (!en) {
        reset();
        return true;
      }
      if (now < st_.transition_ns) return false;
      st_.phase = phase_of_enable::enabled;
      set_csts(st_.csts | csts::rdy);
      return true;
    case phase_of_enable::disabling:
      if (now < st_.transition_ns) return false;
      st_.phase = phase_of_enable::disabled;
      set_csts(0);
      return true;
    case phase_of_enable::failed:
      if (!en) {
        reset();
        return true;
      }
      return false;
    case phase_of_enable::enabled:
      break;
  }
  if (!en) {
    reset();
    return true;
  }
  {
    std::lock_guard lock(faults_mutex_);
    if (faults_.fatal) {
      faults_.fatal = false;
      st_.phase = phase_of_enable::failed;
      set_csts(st_.csts | csts::cfs);
      return true;
    }
  }
  if (st_.shut_down) return false;  // until the driver resets the controller
  if (((cc >> cc::shn_shift) & 3u) != 0) {
    shutdown();
    return true;
  }
  std::uint32_t window;
  {
    std::lock_guard lock(faults_mutex_);
    window = faults_.reorder_window;
  }
  bool work = false;
  for (std::uint16_t q = 0; q < st_.sqs.size(); ++q)
    if (st_.sqs[q].live) work |= fetch(q);
  for (std::uint16_t q = 0; q < st_.cqs.size(); ++q)
    if (st_.cqs[q].live) work |= post(q, now, window);
  return work;
}

// CC.EN 0 -> 1: the admin queues from AQA / ASQ / ACQ; RDY after the
// configured delay. A configuration the model cannot run sets CFS instead.
bool engine::enable() {
  const std::uint32_t cc = read32(bar(), reg::cc);
  const std::uint32_t aqa = read32(bar(), reg::aqa);
  const std::uint64_t asq = read64(bar(), reg::asq);
  const std::uint64_t acq = read64(bar(), reg::acq);
  const std::uint32_t sq_size = (aqa & 0xFFFu) + 1;
  const std::uint32_t cq_size = ((aqa >> 16) & 0xFFFu) + 1;
  const bool ok = ((cc >> cc::mps_shift) & 0xFu) == 0 &&  // 4 KiB pages
                  ((cc >> 4) & 0x7u) == 0 &&              // CSS: NVM command set
                  sq_size >= 2 && cq_size >= 2 && sq_size <= cfg_.max_queue_entries &&
                  cq_size <= cfg_.max_queue_entries && asq != 0 && acq != 0 &&
                  (asq & (page - 1)) == 0 && (acq & (page - 1)) == 0;
  if (!ok) {
    fail();
    return true;
  }
  st_.sqs[0] = {true, reinterpret_cast<const nvme::command*>(asq), sq_size, 0, 0, ~0u};
  st_.cqs[0] = device::state::cq_state{};
  st_.cqs[0].live = true;
  st_.cqs[0].base = reinterpret_cast<nvme::completion*>(acq);
  st_.cqs[0].size = cq_size;
  st_.cqs[0].sqs = 1;
  st_.granted_sqs = st_.granted_cqs = cfg_.max_io_queues;
  st_.io_queues_created = false;
  st_.shut_down = false;
  st_.phase = phase_of_enable::enabling;
  st_.transition_ns = now_ns() + delay_ns();
  return true;
}

// CC.EN 1 -> 0 (a controller reset): every queue and every held completion
// goes; RDY (and CFS, SHST) clear after the configured delay.
void engine::reset() {
  for (auto& q : st_.sqs) q = {};
  for (auto& q : st_.cqs) q = {};
  // A reset clears the doorbells, so a queue made afterwards starts at 0.
  for (std::uint16_t q = 0; q < st_.sqs.size(); ++q) {
    write32(bar(), sq_tail_doorbell(q, cfg_.dstrd), 0);
    write32(bar(), cq_head_doorbell(q, cfg_.dstrd), 0);
  }
  st_.shut_down = false;
  st_.phase = phase_of_enable::disabling;
  st_.transition_ns = now_ns() + delay_ns();
  count([](stats& s) { ++s.resets; });
}

// CC.SHN: post what is held (as far as the CQs have room), make the writes
// durable, report the shutdown complete and take no more commands.
void engine::shutdown() {
  set_csts((st_.csts & ~csts::shst_mask) | csts::shst_occurring);
  const std::uint64_t now = now_ns();
  for (std::uint16_t q = 0; q < st_.cqs.size(); ++q) {
    auto& cq = st_.cqs[q];
    if (!cq.live) continue;
    for (auto& h : cq.held_back) h.ready_ns = now;
    cq.released = static_cast<std::uint32_t>(cq.held_back.size());
    post(q, now, 0);
  }
  ::fdatasync(fd_);
  st_.shut_down = true;
  set_csts((st_.csts & ~csts::shst_mask) | csts::shst_complete);
}

bool engine::fetch(std::uint16_t qid) {
  auto& sq = st_.sqs[qid];
  const std::uint32_t tail = read32(bar(), sq_tail_doorbell(qid, cfg_.dstrd));
  if (tail >= sq.size) {
    if (tail != sq.bad_tail) {
      sq.bad_tail = tail;
      count([](stats& s) { ++s.invalid_doorbells; });
    }
    return false;
  }
  bool any = false;
  for (std::uint32_t n = 0; n < fetch_burst && sq.head != tail; ++n) {
    auto& cq = st_.cqs[sq.cqid];
    // Completions the CQ cannot take yet stay in the SQ: the device holds no
    // more than a CQ's worth.
    if (cq.held_back.size() + 1 >= cq.size) break;
    const nvme::command c = sq.base[sq.head];
    sq.head = (sq.head + 1) % sq.size;
    any = true;
    count([](stats& s) { ++s.commands; });
    std::uint32_t dw0 = 0;
    if (qid == 0) {
      const nvme::status s = execute_admin(c, dw0);
      complete(qid, c, s, dw0, faults{});
      continue;
    }
    faults f;
    {
      std::lock_guard lock(faults_mutex_);
      f = faults_;
      if (faults_.fail_next > 0) --faults_.fail_next;
      if (faults_.drop_next > 0) --faults_.drop_next;
    }
    const nvme::status s = f.fail_next > 0 ? f.fail_status : execute_io(c, f);
    complete(qid, c, s, 0, f);
  }
  return any;
}

void engine::complete(std::uint16_t sqid, const nvme::command& c, nvme::status s, std::uint32_t dw0,
                      const faults& f) {
  if (f.drop_next > 0) {
    count([](stats& st) { ++st.dropped; });
    return;
  }
  auto& cq = st_.cqs[st_.sqs[sqid].cqid];
  nvme::completion e{};
  e.dw0 = dw0;
  e.sq_id = sqid;
  e.sq_head = static_cast<std::uint16_t>(st_.sqs[sqid].head);
  e.cid = c.cid;
  e.status = s.raw;
  const std::uint64_t now = now_ns();
  const auto delay = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(f.delay).count());
  cq.held_back.push_back({now + delay, e});
  cq.last_held_ns = now;
}

// Posts the held completions of CQ `qid` that are due, in order, while the
// ring has room (full: tail + 1 == head). With a reorder window, each group
// goes out reversed.
bool engine::post(std::uint16_t qid, std::uint64_t now, std::uint32_t window) {
  auto& cq = st_.cqs[qid];
  const std::uint32_t head = read32(bar(), cq_head_doorbell(qid, cfg_.dstrd));
  if (head >= cq.size) {
    if (head != cq.bad_head) {
      cq.bad_head = head;
      count([](stats& s) { ++s.invalid_doorbells; });
    }
  } else {
    cq.head = head;
  }
  if (cq.released == 0 && !cq.held_back.empty()) {
    const auto n = static_cast<std::uint32_t>(cq.held_back.size());
    if (window <= 1) {
      cq.released = n;
    } else if (n >= window || now - cq.last_held_ns >= reorder_flush_ns) {
      cq.released = std::min(n, window);
      std::reverse(cq.held_back.begin(), cq.held_back.begin() + cq.released);
    }
  }
  bool any = false;
  std::uint32_t posted = 0;
  while (cq.released > 0 && cq.held_back.front().ready_ns <= now &&
         (cq.tail + 1) % cq.size != cq.head) {
    nvme::completion e = cq.held_back.front().cqe;
    cq.held_back.pop_front();
    --cq.released;
    // The SQ head as it is now (a live SQ), so it never moves backwards.
    if (st_.sqs[e.sq_id].live) e.sq_head = static_cast<std::uint16_t>(st_.sqs[e.sq_id].head);
    nvme::completion& slot = cq.base[cq.tail];
    // Relaxed word stores: a driver may read the entry while it is
    // rewritten (one 8-byte load of dwords 2 and 3 on a GPU); dword 3, last,
    // released: the driver sees the phase flip only after the rest.
    auto* words = reinterpret_cast<std::uint32_t*>(&slot);
    std::atomic_ref<std::uint32_t>(words[0]).store(e.dw0, std::memory_order_relaxed);
    std::atomic_ref<std::uint32_t>(words[1]).store(0, std::memory_order_relaxed);
    std::atomic_ref<std::uint32_t>(words[2]).store(
        std::uint32_t{e.sq_head} | (std::uint32_t{e.sq_id} << 16), std::memory_order_relaxed);
    std::atomic_ref<std::uint32_t>(
        *reinterpret_cast<std::uint32_t*>(reinterpret_cast<unsigned char*>(&slot) +
                                          offsetof(nvme::completion, cid)))
        .store(nvme::completion_dw3(e.cid, nvme::status{e.status}, cq.phase),
               std::memory_order_release);
    if (++cq.tail == cq.size) {
      cq.tail = 0;
      cq.phase = !cq.phase;
    }
    ++posted;
    any = true;
  }
  if (posted > 0) count([posted](stats& s) { s.completions += posted; });
  return any;
}

nvme::status engine::execute_io(const nvme::command& c, const faults& f) {
  if (c.flags != 0) return generic(nvme::sc::invalid_field);
  const auto op = static_cast<nvme::opcode>(c.opc);
  if (op != nvme::opcode::flush && op != nvme::opcode::read && op != nvme::opcode::write)
    return generic(nvme::sc::invalid_opcode);
  if (c.nsid != nsid_one && !(op == nvme::opcode::flush && c.nsid == nsid_all))
    return generic(nvme::sc::invalid_namespace);
  if (f.namespace_not_ready) return generic(nvme::sc::namespace_not_ready, false);
  if (op == nvme::opcode::write && cfg_.read_only)
    return generic(nvme::sc::namespace_write_protected);
  if (op == nvme::opcode::flush && cfg_.read_only) return nvme::status::ok();
  fault_policy* m = cfg_.media.get();
  if (m != nullptr && m->covers(op) && m->before_execute(0, c).kind == fault_kind::io_error)
    return media(op == nvme::opcode::read ? nvme::sc::unrecovered_read : nvme::sc::write_fault);
  if (op == nvme::opcode::flush) {
    const std::uint64_t ticket = m != nullptr ? m->flush_starting() : 0;
    const bool synced = ::fdatasync(fd_) == 0;
    const bool kept = m == nullptr || m->flush_finished(ticket);
    return synced && kept ? nvme::status::ok() : media(nvme::sc::write_fault);
  }
  if (m == nullptr || op != nvme::opcode::write) return transfer(c, op == nvme::opcode::write);
  // The bytes the WRITE puts in the file (none past its end).
  const std::uint64_t offset = c.slba() << nvme::block_shift;
  const bool in_range = c.slba() < dev_.blocks() && c.nlb() <= dev_.blocks() - c.slba() &&
                        offset < dev_.file_bytes();
  const std::uint64_t bytes =
      in_range ? std::min<std::uint64_t>(std::uint64_t{c.nlb()} << nvme::block_shift,
                                         dev_.file_bytes() - offset)
               : 0;
  if (in_range) m->write_starting(offset, static_cast<std::uint32_t>(bytes));
  const nvme::status s = transfer(c, true);
  if (in_range) m->write_finished(offset, static_cast<std::uint32_t>(bytes));
  return s;
}

nvme::status engine::transfer(const nvme::command& c, bool write) {
  const std::uint64_t slba = c.slba();
  const std::uint64_t nlb = c.nlb();
  if (slba >= dev_.blocks() || nlb > dev_.blocks() - slba)
    return generic(nvme::sc::lba_out_of_range);
  const std::uint64_t bytes = nlb << nvme::block_shift;
  if (cfg_.mdts != 0 && bytes > (std::uint64_t{page} << cfg_.mdts))
    return generic(nvme::sc::invalid_field);
  const nvme::status s = walk_prps(c.prp1, c.prp2, bytes, st_.segments);
  if (!s.success()) return s;
  auto offset = static_cast<off_t>(slba << nvme::block_shift);
  for (const segment& g : st_.segments) {
    std::uint32_t done = 0;
    while (done < g.bytes) {
      if (write && static_cast<std::uint64_t>(offset) >= dev_.file_bytes()) {
        offset += static_cast<off_t>(g.bytes - done);  // past the end of the file: dropped
        break;
      }
      const std::uint32_t n =
          write ? static_cast<std::uint32_t>(std::min<std::uint64_t>(
                      g.bytes - done, dev_.file_bytes() - static_cast<std::uint64_t>(offset)))
                : g.bytes - done;
      const ssize_t r = write ? ::pwrite(fd_, g.ptr + done, n, offset)
                              : ::pread(fd_, g.ptr + done, n, offset);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return media(write ? nvme::sc::write_fault : nvme::sc::unrecovered_read);
      if (r == 0) {
        // The end of the file. Past the size it had at open (the partial
        // last block) the namespace reads zeros; before it, the file shrank
        // under the namespace and its bytes are gone: an error, not zeros
        // (as the host controller reports a read that ends early).
        if (write || static_cast<std::uint64_t>(offset) < dev_.file_bytes())
          return media(write ? nvme::sc::write_fault : nvme::sc::unrecovered_read);
        std::memset(g.ptr + done, 0, g.bytes - done);
        offset += static_cast<off_t>(g.bytes - done);
        break;
      }
      done += static_cast<std::uint32_t>(r);
      offset += r;
    }
  }
  return nvme::status::ok();
}

}  // namespace detail

// Naps when a round finds nothing to do: a few yields first (a driver that
// just rang a doorbell is served at once), then sleeps growing to 1 ms.
void device::run() noexcept {
  engine e(*this, *st_, cfg_, fd_, faults_mutex_, faults_, stats_mutex_, stats_);
  unsigned idle = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    bool work = false;
    try {
      work = e.round();
    } catch (...) {
      e.fail();  // the model itself failed: the driver sees CFS
    }
    if (work) {
      idle = 0;
      continue;
    }
    if (++idle < 64) {
      std::this_thread::yield();
    } else {
      const unsigned shift = std::min(idle - 64, 7u);
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000u, 10u << shift)));
    }
  }
}

}  // namespace warpstore::nvme_model
