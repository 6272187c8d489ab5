// The software NVMe controller (nvme_model.h): the register file, the
// enable / disable / shutdown state machine, the admin and NVM commands, PRP
// walking and completion posting, run by one device thread.
#include "controller/nvme_model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

#include "warpstore/error.h"

namespace warpstore::nvme_model {

namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

constexpr std::uint32_t page = device::page_size;
constexpr std::uint32_t nsid_one = 1;
constexpr std::uint32_t nsid_all = 0xFFFFFFFFu;
// Without a reorder window's worth of completions, a CQ's held ones go out
// after this long without a new one.
constexpr std::uint64_t reorder_flush_ns = 1'000'000;
// Commands fetched from one SQ per round before the next SQ gets its turn.
constexpr std::uint32_t fetch_burst = 32;

nvme::status generic(std::uint8_t code, bool dnr = true) {
  return nvme::status::make(nvme::status_type::generic, code, dnr);
}
nvme::status specific(std::uint8_t code) {
  return nvme::status::make(nvme::status_type::command_specific, code);
}
nvme::status media(std::uint8_t code) {
  return nvme::status::make(nvme::status_type::media, code);
}

template <class T>
void put(std::byte* buf, std::size_t at, T v) {
  std::memcpy(buf + at, &v, sizeof v);
}
// An ASCII identify field: left-justified, padded with spaces.
void put_text(std::byte* buf, std::size_t at, std::size_t width, const char* s) {
  std::memset(buf + at, ' ', width);
  std::memcpy(buf + at, s, std::min(width, std::strlen(s)));
}

// A run of host memory one PRP entry describes.
struct segment {
  std::byte* ptr;
  std::uint32_t bytes;
};

// The host memory PRP1 / PRP2 describe for a transfer of `bytes`, with
// the checks a controller makes on the way (Base Specification 1.4, 4.3):
// PRP1 may start anywhere dword aligned; PRP2, when the transfer ends in the
// second page, and every PRP list entry address a page from its start; a
// list fills its page from where PRP2 points, and its last entry chains to
// the next list page while more than one page remains.
nvme::status walk_prps(std::uint64_t prp1, std::uint64_t prp2, std::uint64_t bytes,
                       std::vector<segment>& out) {
  out.clear();
  auto at = [](std::uint64_t a) { return reinterpret_cast<std::byte*>(a); };
  if (prp1 == 0) return generic(nvme::sc::data_transfer_error);
  if ((prp1 & 3) != 0) return generic(nvme::sc::prp_offset_invalid);
  const std::uint64_t first = std::min<std::uint64_t>(bytes, page - (prp1 & (page - 1)));
  out.push_back({at(prp1), static_cast<std::uint32_t>(first)});
  std::uint64_t left = bytes - first;
  if (left == 0) return nvme::status::ok();
  if (prp2 == 0) return generic(nvme::sc::data_transfer_error);
  if (left <= page) {
    if ((prp2 & (page - 1)) != 0) return generic(nvme::sc::prp_offset_invalid);
    out.push_back({at(prp2), static_cast<std::uint32_t>(left)});
    return nvme::status::ok();
  }
  std::uint64_t list = prp2;
  while (left > 0) {
    if ((list & 7) != 0) return generic(nvme::sc::prp_offset_invalid);
    const std::uint64_t entries = (page - (list & (page - 1))) / 8;
    for (std::uint64_t i = 0; i < entries && left > 0; ++i) {
      std::uint64_t e;
      std::memcpy(&e, at(list + 8 * i), sizeof e);
      if (e == 0) return generic(nvme::sc::data_transfer_error);
      if (i + 1 == entries && left > page) {  // the last entry points at the next list page
        list = e;
        break;
      }
      if ((e & (page - 1)) != 0) return generic(nvme::sc::prp_offset_invalid);
      const std::uint64_t n = std::min<std::uint64_t>(left, page);
      out.push_back({at(e), static_cast<std::uint32_t>(n)});
      left -= n;
    }
  }
  return nvme::status::ok();
}

}  // namespace

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

// Everything only the device thread touches.
struct device::state {
  enum class phase_of_enable { disabled, enabling, enabled, disabling, failed };

  struct sq_state {
    bool live = false;
    const nvme::command* base = nullptr;
    std::uint32_t size = 0;
    std::uint16_t cqid = 0;
    std::uint32_t head = 0;
    std::uint32_t bad_tail = ~0u;  // the last invalid doorbell value counted
  };
  struct held {
    std::uint64_t ready_ns;
    nvme::completion cqe;  // status field without the phase
  };
  struct cq_state {
    bool live = false;
    nvme::completion* base = nullptr;
    std::uint32_t size = 0;
    std::uint32_t tail = 0;
    std::uint32_t head = 0;
    bool phase = true;  // the phase tag of the next pass through the ring
    std::uint32_t sqs = 0;
    std::deque<held> held_back;  // executed, not yet posted
    std::uint32_t released = 0;  // entries at the front of held_back cleared to post
    std::uint64_t last_held_ns = 0;
    std::uint32_t bad_head = ~0u;
  };

  phase_of_enable phase = phase_of_enable::disabled;
  std::uint64_t transition_ns = 0;  // when enabling / disabling ends
  bool shut_down = false;
  bool io_queues_created = false;  // since the last reset: Set Features queues refused
  std::uint16_t granted_sqs = 0;
  std::uint16_t granted_cqs = 0;
  std::uint32_t csts = 0;
  std::vector<sq_state> sqs;
  std::vector<cq_state> cqs;
  std::vector<segment> segments;    // scratch of walk_prps
  std::vector<std::byte> identify;  // scratch of Identify
};

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

  fd_ = ::open(cfg_.path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) throw file_error(errno, "nvme model: cannot open the backing file", cfg_.path);
  struct stat sb {};
  if (::fstat(fd_, &sb) != 0) {
    const int err = errno;
    ::close(fd_);
    throw file_error(err, "nvme model: cannot stat the backing file", cfg_.path);
  }
  blocks_ = static_cast<std::uint64_t>(sb.st_size) >> nvme::block_shift;

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

namespace {

// One device thread's work, split out of the class so the header stays small.
class engine {
 public:
  engine(device& dev, device::state& st, const config& cfg, int fd, std::mutex& faults_mutex,
         faults& f, std::mutex& stats_mutex, stats& s)
      : dev_(dev),
        st_(st),
        cfg_(cfg),
        fd_(fd),
        faults_mutex_(faults_mutex),
        faults_(f),
        stats_mutex_(stats_mutex),
        stats_(s) {}

  // One pass: registers, then fetching and executing, then posting. True if
  // anything happened (the caller naps otherwise).
  bool round();
  // A failure of the model itself (out of memory): the controller is fatal.
  void fail() {
    st_.phase = device::state::phase_of_enable::failed;
    set_csts(st_.csts | csts::cfs);
  }

 private:
  using phase_of_enable = device::state::phase_of_enable;

  std::byte* bar() { return dev_.bar(); }
  void set_csts(std::uint32_t v) {
    st_.csts = v;
    write32(bar(), reg::csts, v);
  }
  std::uint64_t delay_ns() const {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.ready_delay).count());
  }
  template <class F>
  void count(F f) {
    std::lock_guard lock(stats_mutex_);
    f(stats_);
  }

  bool enable();
  void reset();
  void shutdown();
  bool fetch(std::uint16_t qid);
  bool post(std::uint16_t qid, std::uint64_t now, std::uint32_t window);
  void complete(std::uint16_t sqid, const nvme::command& c, nvme::status s, std::uint32_t dw0,
                const faults& f);
  nvme::status execute_admin(const nvme::command& c, std::uint32_t& dw0);
  nvme::status execute_io(const nvme::command& c, const faults& f);
  nvme::status identify(const nvme::command& c);
  nvme::status set_features(const nvme::command& c, std::uint32_t& dw0);
  nvme::status create_cq(const nvme::command& c);
  nvme::status create_sq(const nvme::command& c);
  nvme::status delete_sq(const nvme::command& c);
  nvme::status delete_cq(const nvme::command& c);
  nvme::status transfer(const nvme::command& c, bool write);

  device& dev_;
  device::state& st_;
  const config& cfg_;
  int fd_;
  std::mutex& faults_mutex_;
  faults& faults_;
  std::mutex& stats_mutex_;
  stats& stats_;
};

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
    slot.dw0 = e.dw0;
    slot.dw1 = 0;
    slot.sq_head = e.sq_head;
    slot.sq_id = e.sq_id;
    // Dword 3 last, released: the driver sees the phase flip only after the rest.
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

nvme::status engine::execute_admin(const nvme::command& c, std::uint32_t& dw0) {
  if (c.flags != 0) return generic(nvme::sc::invalid_field);  // fused or SGL: unsupported
  switch (static_cast<nvme::admin_opcode>(c.opc)) {
    case nvme::admin_opcode::identify:
      return identify(c);
    case nvme::admin_opcode::set_features:
      return set_features(c, dw0);
    case nvme::admin_opcode::create_io_cq:
      return create_cq(c);
    case nvme::admin_opcode::create_io_sq:
      return create_sq(c);
    case nvme::admin_opcode::delete_io_sq:
      return delete_sq(c);
    case nvme::admin_opcode::delete_io_cq:
      return delete_cq(c);
  }
  return generic(nvme::sc::invalid_opcode);
}

nvme::status engine::identify(const nvme::command& c) {
  std::byte* d = st_.identify.data();
  std::memset(d, 0, page);
  switch (c.cdw10 & 0xFFu) {
    case 0x00: {  // namespace (figure 245)
      if (c.nsid != nsid_one) return generic(nvme::sc::invalid_namespace);
      const std::uint64_t blocks = dev_.blocks();
      put<std::uint64_t>(d, 0, blocks);   // NSZE
      put<std::uint64_t>(d, 8, blocks);   // NCAP
      put<std::uint64_t>(d, 16, blocks);  // NUSE
      put<std::uint8_t>(d, 25, 0);        // NLBAF: one format (0-based)
      put<std::uint8_t>(d, 26, 0);        // FLBAS: format 0, no metadata
      put<std::uint32_t>(d, 128, std::uint32_t{nvme::block_shift} << 16);  // LBAF0: LBADS 9
      break;
    }
    case 0x01: {                                    // controller (figure 247)
      put<std::uint16_t>(d, 0, device::vendor_id);  // VID
      put<std::uint16_t>(d, 2, device::vendor_id);  // SSVID
      put_text(d, 4, 20, device::serial);           // SN
      put_text(d, 24, 40, device::model_name);      // MN
      put_text(d, 64, 8, "1.0");                    // FR
      put<std::uint8_t>(d, 77, cfg_.mdts);          // MDTS
      put<std::uint32_t>(d, 80, 0x00010400u);       // VER
      put<std::uint8_t>(d, 512, 0x66);              // SQES: 64-byte entries
      put<std::uint8_t>(d, 513, 0x44);              // CQES: 16-byte entries
      put<std::uint32_t>(d, 516, 1);                // NN: one namespace
      put<std::uint8_t>(d, 525, 1);                 // VWC: FLUSH means something
      break;
    }
    case 0x02:  // active namespace list
      put<std::uint32_t>(d, 0, nsid_one);
      break;
    default:
      return generic(nvme::sc::invalid_field);
  }
  const nvme::status s = walk_prps(c.prp1, c.prp2, page, st_.segments);
  if (!s.success()) return s;
  std::uint32_t at = 0;
  for (const segment& g : st_.segments) {
    std::memcpy(g.ptr, d + at, g.bytes);
    at += g.bytes;
  }
  return nvme::status::ok();
}

nvme::status engine::set_features(const nvme::command& c, std::uint32_t& dw0) {
  if ((c.cdw10 & 0xFFu) != 0x07) return generic(nvme::sc::invalid_field);  // only the queue count
  if (st_.io_queues_created) return generic(nvme::sc::command_sequence_error);
  const std::uint32_t nsqr = c.cdw11 & 0xFFFFu;
  const std::uint32_t ncqr = c.cdw11 >> 16;
  if (nsqr == 0xFFFFu || ncqr == 0xFFFFu) return generic(nvme::sc::invalid_field);
  st_.granted_sqs =
      static_cast<std::uint16_t>(std::min<std::uint32_t>(nsqr + 1, cfg_.max_io_queues));
  st_.granted_cqs =
      static_cast<std::uint16_t>(std::min<std::uint32_t>(ncqr + 1, cfg_.max_io_queues));
  dw0 = (st_.granted_sqs - 1u) | ((st_.granted_cqs - 1u) << 16);
  return nvme::status::ok();
}

nvme::status engine::create_cq(const nvme::command& c) {
  const std::uint32_t qid = c.cdw10 & 0xFFFFu;
  const std::uint32_t size = (c.cdw10 >> 16) + 1;
  if (qid == 0 || qid > st_.granted_cqs || st_.cqs[qid].live)
    return specific(nvme::sc::invalid_queue_identifier);
  if (size < 2 || size > cfg_.max_queue_entries) return specific(nvme::sc::invalid_queue_size);
  if ((c.cdw11 & 1u) == 0) return generic(nvme::sc::invalid_field);  // CAP.CQR: contiguous only
  if (((read32(bar(), reg::cc) >> cc::iocqes_shift) & 0xFu) != 4)
    return generic(nvme::sc::invalid_field);  // CC.IOCQES must say 16-byte entries
  if (c.prp1 == 0) return generic(nvme::sc::invalid_field);
  if ((c.prp1 & (page - 1)) != 0) return generic(nvme::sc::prp_offset_invalid);
  auto& cq = st_.cqs[qid];
  cq = device::state::cq_state{};
  cq.live = true;
  cq.base = reinterpret_cast<nvme::completion*>(c.prp1);
  cq.size = size;
  // The doorbell of a queue deleted earlier may still hold its last head.
  write32(bar(), cq_head_doorbell(static_cast<std::uint16_t>(qid), cfg_.dstrd), 0);
  st_.io_queues_created = true;
  return nvme::status::ok();
}

nvme::status engine::create_sq(const nvme::command& c) {
  const std::uint32_t qid = c.cdw10 & 0xFFFFu;
  const std::uint32_t size = (c.cdw10 >> 16) + 1;
  const std::uint32_t cqid = c.cdw11 >> 16;
  if (qid == 0 || qid > st_.granted_sqs || st_.sqs[qid].live)
    return specific(nvme::sc::invalid_queue_identifier);
  if (size < 2 || size > cfg_.max_queue_entries) return specific(nvme::sc::invalid_queue_size);
  if (cqid == 0 || cqid >= st_.cqs.size() || !st_.cqs[cqid].live)
    return specific(nvme::sc::completion_queue_invalid);
  if ((c.cdw11 & 1u) == 0) return generic(nvme::sc::invalid_field);
  if (((read32(bar(), reg::cc) >> cc::iosqes_shift) & 0xFu) != 6)
    return generic(nvme::sc::invalid_field);  // CC.IOSQES must say 64-byte entries
  if (c.prp1 == 0) return generic(nvme::sc::invalid_field);
  if ((c.prp1 & (page - 1)) != 0) return generic(nvme::sc::prp_offset_invalid);
  st_.sqs[qid] = {true, reinterpret_cast<const nvme::command*>(c.prp1),
                  size, static_cast<std::uint16_t>(cqid),
                  0,    ~0u};
  write32(bar(), sq_tail_doorbell(static_cast<std::uint16_t>(qid), cfg_.dstrd), 0);
  ++st_.cqs[cqid].sqs;
  st_.io_queues_created = true;
  return nvme::status::ok();
}

// The model executes a command when it fetches it, so a deleted SQ has
// nothing in flight to abort; its completions already held still post.
nvme::status engine::delete_sq(const nvme::command& c) {
  const std::uint32_t qid = c.cdw10 & 0xFFFFu;
  if (qid == 0 || qid >= st_.sqs.size() || !st_.sqs[qid].live)
    return specific(nvme::sc::invalid_queue_identifier);
  --st_.cqs[st_.sqs[qid].cqid].sqs;
  st_.sqs[qid].live = false;
  return nvme::status::ok();
}

nvme::status engine::delete_cq(const nvme::command& c) {
  const std::uint32_t qid = c.cdw10 & 0xFFFFu;
  if (qid == 0 || qid >= st_.cqs.size() || !st_.cqs[qid].live)
    return specific(nvme::sc::invalid_queue_identifier);
  if (st_.cqs[qid].sqs != 0) return specific(nvme::sc::invalid_queue_deletion);
  st_.cqs[qid] = device::state::cq_state{};
  return nvme::status::ok();
}

nvme::status engine::execute_io(const nvme::command& c, const faults& f) {
  if (c.flags != 0) return generic(nvme::sc::invalid_field);
  const auto op = static_cast<nvme::opcode>(c.opc);
  if (op != nvme::opcode::flush && op != nvme::opcode::read && op != nvme::opcode::write)
    return generic(nvme::sc::invalid_opcode);
  if (c.nsid != nsid_one && !(op == nvme::opcode::flush && c.nsid == nsid_all))
    return generic(nvme::sc::invalid_namespace);
  if (f.namespace_not_ready) return generic(nvme::sc::namespace_not_ready, false);
  if (op == nvme::opcode::flush)
    return ::fdatasync(fd_) == 0 ? nvme::status::ok() : media(nvme::sc::write_fault);
  return transfer(c, op == nvme::opcode::write);
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
      const ssize_t r = write ? ::pwrite(fd_, g.ptr + done, g.bytes - done, offset)
                              : ::pread(fd_, g.ptr + done, g.bytes - done, offset);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return media(write ? nvme::sc::write_fault : nvme::sc::unrecovered_read);
      if (r == 0) {  // the file shrank under the namespace: what is gone reads as zeros
        if (write) return media(nvme::sc::write_fault);
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

}  // namespace

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
