// The user-space NVMe driver core (nvme_driver.h): bring-up, admin
// commands, I/O queue creation, the synchronous I/O helpers and shutdown.
// Section numbers are those of the NVM Express Base Specification 1.4.
#include "controller/nvme_driver.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "warpstore/error.h"

namespace warpstore {

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

// The memory page size the driver configures (CC.MPS = 0): 4 KiB. PRPs,
// queue bases and MDTS are in these units.
constexpr std::uint64_t page = 4096;
constexpr std::uint32_t prp_entries_per_page = page / sizeof(std::uint64_t);
// The helpers' own cap on one command, whatever MDTS allows: bounds the PRP
// list memory (2049 entries, 5 pages).
constexpr std::uint64_t helper_max_transfer = 8ull << 20;
// Polling: how many empty polls between clock and CSTS checks.
constexpr unsigned polls_per_check = 64;

std::uint64_t round_up(std::uint64_t v, std::uint64_t to) {
  return (v + to - 1) / to * to;
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string ms_text(std::chrono::milliseconds d) {
  std::string s = std::to_string(d.count());
  s += " ms";
  return s;
}

// An ASCII Identify field (space padded): trailing spaces and NULs removed.
std::string text_field(const std::byte* d, std::size_t at, std::size_t width) {
  std::string s(reinterpret_cast<const char*>(d + at), width);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

template <class T>
T get(const std::byte* d, std::size_t at) {
  T v;
  std::memcpy(&v, d + at, sizeof v);
  return v;
}

error_info info_of(error_kind kind, const std::string& name, nvme::status st = nvme::status::ok(),
                   std::optional<std::uint64_t> lba = std::nullopt) {
  error_info i;
  i.kind = kind;
  i.path = name;
  i.status = st;
  i.lba = lba;
  return i;
}

// Dword 3 of a CQE, read with acquire: the word the controller writes last
// (the phase tag), so the rest of the entry is valid once it shows the phase.
std::uint32_t load_dw3(const nvme::completion& e) {
  return std::atomic_ref<const std::uint32_t>(
             *reinterpret_cast<const std::uint32_t*>(reinterpret_cast<const unsigned char*>(&e) +
                                                     offsetof(nvme::completion, cid)))
      .load(std::memory_order_acquire);
}

const char* opcode_name(nvme::opcode op) {
  switch (op) {
    case nvme::opcode::read:
      return "READ";
    case nvme::opcode::write:
      return "WRITE";
    case nvme::opcode::flush:
      return "FLUSH";
  }
  return "I/O";
}

nvme::command admin_command(nvme::admin_opcode op) {
  nvme::command c{};
  c.opc = static_cast<std::uint8_t>(op);
  return c;
}

}  // namespace

// ---- host_dma_memory -----------------------------------------------------------

void* host_dma_memory::alloc(std::size_t bytes, std::size_t align) {
  align = std::max(align, alignof(std::max_align_t));
  const std::size_t n = round_up(std::max<std::size_t>(bytes, 1), align);
  void* p = std::aligned_alloc(align, n);
  if (p == nullptr) {
    std::string m = "nvme: cannot allocate ";
    m += std::to_string(n);
    m += " bytes of DMA memory";
    throw runtime_error(m);
  }
  std::memset(p, 0, n);
  return p;
}

std::uint64_t host_dma_memory::iova(const void* p) const {
  return reinterpret_cast<std::uint64_t>(p);
}

void host_dma_memory::free(void* p) noexcept {
  std::free(p);
}

// ---- dma_block -----------------------------------------------------------------

nvme_driver::dma_block::dma_block(dma_memory& m, std::size_t bytes, std::size_t align)
    : mem(&m), ptr(m.alloc(bytes, align)) {}

nvme_driver::dma_block::dma_block(dma_block&& o) noexcept
    : mem(std::exchange(o.mem, nullptr)), ptr(std::exchange(o.ptr, nullptr)) {}

nvme_driver::dma_block& nvme_driver::dma_block::operator=(dma_block&& o) noexcept {
  if (this != &o) {
    if (ptr != nullptr) mem->free(ptr);
    mem = std::exchange(o.mem, nullptr);
    ptr = std::exchange(o.ptr, nullptr);
  }
  return *this;
}

nvme_driver::dma_block::~dma_block() {
  if (ptr != nullptr) mem->free(ptr);
}

// ---- registers -----------------------------------------------------------------
//
// 32- and 64-bit accesses, never torn. Acquire on reads and release on
// writes: a doorbell write orders the SQEs (and PRP lists) written before it,
// which is what the model needs and what x86 gives for uncached MMIO anyway.
// (On a weakly ordered host, a device would need a DMA write barrier here.)

std::uint32_t nvme_driver::read32(std::uint32_t offset) const {
  return std::atomic_ref<const std::uint32_t>(
             *reinterpret_cast<const std::uint32_t*>(bar_.base + offset))
      .load(std::memory_order_acquire);
}
std::uint64_t nvme_driver::read64(std::uint32_t offset) const {
  return std::atomic_ref<const std::uint64_t>(
             *reinterpret_cast<const std::uint64_t*>(bar_.base + offset))
      .load(std::memory_order_acquire);
}
void nvme_driver::write32(std::uint32_t offset, std::uint32_t value) const {
  std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(bar_.base + offset))
      .store(value, std::memory_order_release);
}
void nvme_driver::write64(std::uint32_t offset, std::uint64_t value) const {
  std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(bar_.base + offset))
      .store(value, std::memory_order_release);
}

std::uint32_t nvme_driver::csts() const {
  return read32(nvme_reg::csts);
}

std::string nvme_driver::prefix() const {
  std::string s = "nvme ";
  s += options_.name;
  s += ": ";
  return s;
}

// ---- bring-up ------------------------------------------------------------------

nvme_driver::nvme_driver(nvme_bar bar, dma_memory& mem, nvme_driver_options options)
    : bar_(bar), mem_(mem), options_(std::move(options)) {
  if (bar_.base == nullptr || bar_.bytes < nvme_reg::doorbells + 8)
    throw invalid_argument(prefix() + "BAR0 is not mapped or smaller than its doorbells");
  if (options_.io_queues == 0 || options_.io_queues == 0xFFFF)
    throw invalid_argument(prefix() + "io_queues must be 1..65534");
  if (options_.io_queue_entries < 2 || options_.admin_queue_entries < 2)
    throw invalid_argument(prefix() + "queues need at least 2 entries");
  try {
    bring_up();
  } catch (...) {
    teardown_after_failure();
    throw;
  }
}

nvme_driver::~nvme_driver() {
  const nvme_shutdown_report r = shutdown();
  if (!r.shutdown_complete && !r.disabled) {
    // The controller may still be running and writing into the queues: the
    // memory it may reach is left allocated rather than handed back.
    admin_.sq_mem.ptr = admin_.cq_mem.ptr = nullptr;
    for (ring& q : io_) q.sq_mem.ptr = q.cq_mem.ptr = nullptr;
    prp_list_.ptr = scratch_.ptr = nullptr;
  }
}

void nvme_driver::bring_up() {
  // CAP (3.1.1).
  const std::uint64_t cap = read64(nvme_reg::cap);
  if (cap == ~std::uint64_t{0})
    throw runtime_error(prefix() +
                            "registers read all ones: the device is gone or BAR0 is "
                            "not mapped",
                        info_of(error_kind::runtime, options_.name));
  cap_.max_queue_entries = static_cast<std::uint32_t>(cap & 0xFFFF) + 1;
  cap_.contiguous_queues_required = ((cap >> 16) & 1) != 0;
  cap_.ready_timeout =
      std::chrono::milliseconds(500 * std::max<std::uint64_t>(1, (cap >> 24) & 0xFF));
  cap_.doorbell_stride = static_cast<std::uint32_t>((cap >> 32) & 0xF);
  const auto css = static_cast<std::uint32_t>((cap >> 37) & 0xFF);
  const auto mpsmin = static_cast<std::uint32_t>((cap >> 48) & 0xF);
  if ((css & 1u) == 0)
    throw runtime_error(prefix() + "CAP.CSS " + hex(css) + " lacks the NVM command set",
                        info_of(error_kind::runtime, options_.name));
  if (mpsmin != 0) {
    std::string m = prefix();
    m += "CAP.MPSMIN ";
    m += std::to_string(mpsmin);
    m += ": the controller's smallest page is larger than the 4 KiB the driver uses";
    throw runtime_error(m, info_of(error_kind::runtime, options_.name));
  }
  identity_.version = read32(nvme_reg::vs);

  // Disable (7.6.1 step 1; 3.1.5): CC.EN = 0, then CSTS.RDY = 0 within CAP.TO.
  const std::uint32_t cc = read32(nvme_reg::cc);
  if ((cc & nvme_reg::cc_en) != 0) write32(nvme_reg::cc, cc & ~nvme_reg::cc_en);
  wait_ready(false, "disabling (CC.EN = 0)");

  // Admin queues (7.6.1 step 2; 3.1.8-3.1.10): AQA sizes are 12-bit, 0-based.
  const std::uint32_t admin_entries =
      std::min({options_.admin_queue_entries, cap_.max_queue_entries, 4096u});
  admin_ = make_ring(0, admin_entries);
  write32(nvme_reg::aqa, (admin_entries - 1) | ((admin_entries - 1) << 16));
  write64(nvme_reg::asq, mem_.iova(admin_.sq));
  write64(nvme_reg::acq, mem_.iova(admin_.cq));

  // Enable (7.6.1 steps 3-4): NVM command set, 4 KiB pages, 64-byte SQEs
  // (2^6) and 16-byte CQEs (2^4), round robin arbitration; then RDY = 1.
  write32(nvme_reg::cc, nvme_reg::cc_en | (0u << nvme_reg::cc_css_shift) |
                            (0u << nvme_reg::cc_mps_shift) | (6u << nvme_reg::cc_iosqes_shift) |
                            (4u << nvme_reg::cc_iocqes_shift));
  wait_ready(true, "enabling (CC.EN = 1)");

  scratch_ = dma_block(mem_, page, page);
  const auto* d = static_cast<const std::byte*>(scratch_.ptr);

  // Identify Controller (CNS 01h, 5.15.2.2, figure 247).
  {
    nvme::command c = admin_command(nvme::admin_opcode::identify);
    c.prp1 = mem_.iova(scratch_.ptr);
    c.cdw10 = 0x01;
    admin_locked(c, "Identify Controller");
    identity_.vendor_id = get<std::uint16_t>(d, 0);
    identity_.serial = text_field(d, 4, 20);
    identity_.model = text_field(d, 24, 40);
    identity_.firmware = text_field(d, 64, 8);
    const auto mdts = get<std::uint8_t>(d, 77);
    // MDTS is in units of the minimum page size, 4 KiB here (MPSMIN 0).
    identity_.mdts_bytes = mdts == 0 ? 0 : page << std::min<unsigned>(mdts, 40);
    identity_.namespaces = get<std::uint32_t>(d, 516);
    const auto sqes = get<std::uint8_t>(d, 512);
    const auto cqes = get<std::uint8_t>(d, 513);
    // SQES / CQES: required (3:0) <= what CC says <= maximum (7:4).
    if ((sqes & 0xF) > 6 || (sqes >> 4) < 6 || (cqes & 0xF) > 4 || (cqes >> 4) < 4) {
      std::string m = prefix();
      m += "Identify Controller: SQES ";
      m += hex(sqes);
      m += " / CQES ";
      m += hex(cqes);
      m += " do not allow 64-byte SQEs and 16-byte CQEs";
      throw runtime_error(m, info_of(error_kind::runtime, options_.name));
    }
  }

  // Identify Namespace (CNS 00h, figure 245): size and the LBA format in use.
  {
    std::string what = "Identify Namespace ";
    what += std::to_string(options_.nsid);
    nvme::command c = admin_command(nvme::admin_opcode::identify);
    c.nsid = options_.nsid;
    c.prp1 = mem_.iova(scratch_.ptr);
    c.cdw10 = 0x00;
    std::memset(scratch_.ptr, 0, page);
    admin_locked(c, what);
    identity_.blocks = get<std::uint64_t>(d, 0);
    const auto nlbaf = get<std::uint8_t>(d, 25);
    const auto flbas = get<std::uint8_t>(d, 26);
    // FLBAS 3:0 (and, from 2.0, 6:5 as the upper bits) select the format.
    const unsigned format = (flbas & 0xFu) | (((flbas >> 5) & 3u) << 4);
    const auto lbaf = get<std::uint32_t>(d, 128 + 4 * std::size_t{format});
    const unsigned ms = lbaf & 0xFFFF;
    const unsigned lbads = (lbaf >> 16) & 0xFF;
    std::string problem;
    if (identity_.blocks == 0) {
      problem = "is not active (NSZE 0)";
    } else if (format > nlbaf) {
      problem = "selects LBA format ";
      problem += std::to_string(format);
      problem += " beyond NLBAF";
    } else if (lbads < 9 || lbads > 16) {
      problem = "has an LBA data size of 2^";
      problem += std::to_string(lbads);
      problem += " bytes (the driver takes 512 B to 64 KiB)";
    } else if (ms != 0) {
      problem = "carries ";
      problem += std::to_string(ms);
      problem += " bytes of metadata per block, which the driver does not support";
    }
    if (!problem.empty())
      throw runtime_error(prefix() + what + ": the namespace " + problem,
                          info_of(error_kind::runtime, options_.name));
    identity_.block_size = 1u << lbads;
  }

  // The helpers' largest command: MDTS, NLB (16 bits, 0-based), own cap.
  max_transfer_ =
      std::min<std::uint64_t>(helper_max_transfer, std::uint64_t{65536} * identity_.block_size);
  if (identity_.mdts_bytes != 0) max_transfer_ = std::min(max_transfer_, identity_.mdts_bytes);
  if (max_transfer_ < identity_.block_size) {
    std::string m = prefix();
    m += "MDTS of ";
    m += std::to_string(identity_.mdts_bytes);
    m += " bytes is less than one block";
    throw runtime_error(m, info_of(error_kind::runtime, options_.name));
  }
  // A buffer that does not start on a page touches one page more. Every list
  // page but the last gives its last entry to the chain (4.3).
  const std::uint64_t list_entries = max_transfer_ / page + 1;
  prp_list_pages_ = static_cast<std::size_t>((list_entries + prp_entries_per_page - 2) /
                                             (prp_entries_per_page - 1));
  prp_list_ = dma_block(mem_, prp_list_pages_ * page, page);

  // Set Features, Number of Queues (FID 07h, 5.21.1.7): 0-based counts in
  // CDW11 (NSQR 15:0, NCQR 31:16); the grant comes back the same way in DW0.
  {
    const std::uint32_t ask = options_.io_queues - 1u;
    nvme::command c = admin_command(nvme::admin_opcode::set_features);
    c.cdw10 = 0x07;
    c.cdw11 = ask | (ask << 16);
    const nvme::completion e = admin_locked(c, "Set Features Number of Queues");
    const std::uint32_t nsqa = (e.dw0 & 0xFFFF) + 1;
    const std::uint32_t ncqa = (e.dw0 >> 16) + 1;
    granted_ =
        static_cast<std::uint16_t>(std::min<std::uint32_t>({options_.io_queues, nsqa, ncqa}));
  }
  create_io_queues();
}

void nvme_driver::wait_ready(bool ready, const char* step) {
  const auto deadline = clock_type::now() + cap_.ready_timeout;
  for (;;) {
    const std::uint32_t s = csts();
    if (s == ~0u)
      throw runtime_error(
          prefix() + "registers read all ones while " + step + ": the device is gone",
          info_of(error_kind::runtime, options_.name));
    // CFS while enabling: the controller refused its configuration or failed.
    if (ready && (s & nvme_reg::csts_cfs) != 0)
      throw runtime_error(
          prefix() + "controller fatal status (CSTS.CFS) while " + step + "; CSTS " + hex(s),
          info_of(error_kind::runtime, options_.name));
    if (((s & nvme_reg::csts_rdy) != 0) == ready) return;
    if (clock_type::now() >= deadline) {
      std::string m = prefix();
      m += "CSTS.RDY did not become ";
      m += ready ? "1" : "0";
      m += " within CAP.TO (";
      m += ms_text(cap_.ready_timeout);
      m += ") while ";
      m += step;
      m += "; CSTS ";
      m += hex(s);
      throw runtime_error(m,
                          info_of(error_kind::deadline, options_.name, nvme::status::deadline()));
    }
    std::this_thread::sleep_for(50us);
  }
}

// A controller that failed bring-up is reset (CC.EN = 0), which deletes
// every queue (7.3.1); the memory goes only once RDY is 0 (else it leaks).
void nvme_driver::teardown_after_failure() noexcept {
  shut_down_ = true;
  bool stopped = false;
  try {
    write32(nvme_reg::cc, read32(nvme_reg::cc) & ~nvme_reg::cc_en);
    wait_ready(false, "disabling after a failed bring-up");
    stopped = true;
  } catch (...) {
  }
  report_.disabled = stopped;
  if (!stopped) {
    admin_.sq_mem.ptr = admin_.cq_mem.ptr = nullptr;
    for (ring& q : io_) q.sq_mem.ptr = q.cq_mem.ptr = nullptr;
    prp_list_.ptr = scratch_.ptr = nullptr;
  }
}

nvme_driver::ring nvme_driver::make_ring(std::uint16_t qid, std::uint32_t entries) {
  ring r;
  r.qid = qid;
  r.entries = entries;
  // Whole pages, page aligned: queue bases must be (CC.MPS) page aligned
  // and, with CAP.CQR or PC = 1, contiguous (5.3, 5.4).
  r.sq_mem = dma_block(mem_, round_up(std::uint64_t{entries} * sizeof(nvme::command), page), page);
  r.cq_mem =
      dma_block(mem_, round_up(std::uint64_t{entries} * sizeof(nvme::completion), page), page);
  r.sq = static_cast<nvme::command*>(r.sq_mem.ptr);
  r.cq = static_cast<nvme::completion*>(r.cq_mem.ptr);
  return r;
}

// Create I/O Completion Queue (5.3) and Create I/O Submission Queue (5.4),
// one pair per qid, SQ n completing into CQ n; no interrupts (IEN 0),
// physically contiguous (PC 1).
void nvme_driver::create_io_queues() {
  const std::uint32_t entries = std::min(options_.io_queue_entries, cap_.max_queue_entries);
  const std::uint32_t dstrd = cap_.doorbell_stride;
  io_.reserve(granted_);
  for (std::uint16_t qid = 1; qid <= granted_; ++qid) {
    if (nvme_reg::cq_head_doorbell(qid, dstrd) + 4ull > bar_.bytes) {
      std::string m = prefix();
      m += "BAR0 of ";
      m += std::to_string(bar_.bytes);
      m += " bytes ends before the doorbells of queue ";
      m += std::to_string(qid);
      throw runtime_error(m, info_of(error_kind::runtime, options_.name));
    }
    io_.push_back(make_ring(qid, entries));
    ring& r = io_.back();
    std::string q = " ";
    q += std::to_string(qid);
    q += " (";
    q += std::to_string(entries);
    q += " entries)";

    nvme::command c = admin_command(nvme::admin_opcode::create_io_cq);
    c.prp1 = mem_.iova(r.cq);
    c.cdw10 = qid | ((entries - 1) << 16);
    c.cdw11 = 1;  // PC
    std::string what = "Create I/O Completion Queue";
    what += q;
    admin_locked(c, what);
    r.cq_created = true;

    c = admin_command(nvme::admin_opcode::create_io_sq);
    c.prp1 = mem_.iova(r.sq);
    c.cdw10 = qid | ((entries - 1) << 16);
    c.cdw11 = 1u | (std::uint32_t{qid} << 16);  // PC, CQID
    what = "Create I/O Submission Queue";
    what += q;
    admin_locked(c, what);
    r.created = true;

    nvme_queue_pair p;
    p.qid = qid;
    p.entries = entries;
    p.sq = r.sq;
    p.cq = r.cq;
    p.sq_iova = mem_.iova(r.sq);
    p.cq_iova = mem_.iova(r.cq);
    p.sq_tail_doorbell =
        reinterpret_cast<std::uint32_t*>(bar_.base + nvme_reg::sq_tail_doorbell(qid, dstrd));
    p.cq_head_doorbell =
        reinterpret_cast<std::uint32_t*>(bar_.base + nvme_reg::cq_head_doorbell(qid, dstrd));
    pairs_.push_back(p);
  }
}

// ---- commands ------------------------------------------------------------------

void nvme_driver::check_fatal(const std::string& what) const {
  const std::uint32_t s = csts();
  if (s == ~0u)
    throw runtime_error(
        prefix() + "registers read all ones while waiting for " + what + ": the device is gone",
        info_of(error_kind::runtime, options_.name));
  if ((s & nvme_reg::csts_cfs) != 0)
    throw runtime_error(prefix() + "controller fatal status (CSTS.CFS) while waiting for " + what +
                            "; the controller must be reset (CSTS " + hex(s) + ")",
                        info_of(error_kind::runtime, options_.name));
}

// Submits `c` on ring `r` and polls its CQ (phase tag, 4.6) for the
// completion of that cid until `timeout`. Other completions found on the
// way belong to commands abandoned earlier: retired and counted.
nvme::completion nvme_driver::execute(ring& r, nvme::command c, std::chrono::milliseconds timeout,
                                      const std::string& what, std::uint64_t lba, bool has_lba) {
  const auto deadline = clock_type::now() + timeout;
  const std::uint32_t dstrd = cap_.doorbell_stride;
  const std::optional<std::uint64_t> lba_opt =
      has_lba ? std::optional<std::uint64_t>(lba) : std::nullopt;
  bool submitted = false;
  std::uint16_t cid = 0;

  // Retires the CQE at the head if its phase says it is new.
  auto retire = [&](nvme::completion& out) {
    const std::uint32_t dw3 = load_dw3(r.cq[r.cq_head]);
    if (nvme::dw3_phase(dw3) != r.phase) return false;
    out = r.cq[r.cq_head];
    if (++r.cq_head == r.entries) {
      r.cq_head = 0;
      r.phase = !r.phase;
    }
    write32(nvme_reg::cq_head_doorbell(r.qid, dstrd), r.cq_head);
    r.sq_head = out.sq_head;
    return true;
  };

  for (unsigned polls = 0;; ++polls) {
    if (!submitted && (r.tail + 1) % r.entries != r.sq_head) {
      // The SQ has room (it is full when tail + 1 == head, 4.1.2).
      cid = r.next_cid;
      r.next_cid = static_cast<std::uint16_t>(r.next_cid == 0xFFFE ? 0 : r.next_cid + 1);
      c.cid = cid;
      r.sq[r.tail] = c;
      r.tail = (r.tail + 1) % r.entries;
      // The release store orders the SQE (and any PRP list) before it.
      write32(nvme_reg::sq_tail_doorbell(r.qid, dstrd), r.tail);
      submitted = true;
    }
    nvme::completion e;
    if (retire(e)) {
      polls = 0;
      if (!submitted || e.cid != cid || e.sq_id != r.qid) {
        ++stale_;
        continue;
      }
      const nvme::status st{static_cast<std::uint16_t>(e.status >> 1)};
      if (st.success()) return e;
      std::string m = prefix();
      m += what;
      m += ": ";
      m += describe(st);
      if ((st.raw & (1u << 14)) == 0) m += ", DNR clear (a retry may succeed)";
      throw runtime_error(m, info_of(error_kind::io, options_.name, st, lba_opt));
    }
    if (polls % polls_per_check == polls_per_check - 1) {
      check_fatal(what);
      if (clock_type::now() >= deadline) {
        std::string m = prefix();
        if (submitted) {
          m += "no completion for ";
          m += what;
          m += " within ";
          m += ms_text(timeout);
          m += "; the command is abandoned (a late completion will be ignored)";
        } else {
          m += what;
          m += " not submitted: submission queue ";
          m += std::to_string(r.qid);
          m += " stayed full for ";
          m += ms_text(timeout);
        }
        throw runtime_error(
            m, info_of(error_kind::deadline, options_.name, nvme::status::deadline(), lba_opt));
      }
      std::this_thread::yield();
    }
  }
}

nvme::completion nvme_driver::admin_locked(const nvme::command& c, const std::string& what) {
  return execute(admin_, c, options_.admin_timeout, what, 0, false);
}

nvme::completion nvme_driver::admin(nvme::command c, const std::string& what) {
  std::lock_guard lock(mutex_);
  if (shut_down_) throw logic_error(prefix() + what + " after shutdown", options_.name);
  return admin_locked(c, what);
}

nvme_driver::ring& nvme_driver::io_ring(std::uint16_t qid, const char* op) {
  if (shut_down_) throw logic_error(prefix() + op + " after shutdown", options_.name);
  if (qid == 0 || qid > io_.size()) {
    std::string m = prefix();
    m += op;
    m += " on queue ";
    m += std::to_string(qid);
    m += ": the I/O queues are 1..";
    m += std::to_string(io_.size());
    throw invalid_argument(m, options_.name);
  }
  return io_[qid - 1];
}

void nvme_driver::read_blocks(std::uint16_t qid, std::uint64_t lba, std::uint64_t count,
                              void* buffer) {
  transfer(nvme::opcode::read, qid, lba, count, buffer);
}

void nvme_driver::write_blocks(std::uint16_t qid, std::uint64_t lba, std::uint64_t count,
                               const void* buffer) {
  transfer(nvme::opcode::write, qid, lba, count, buffer);
}

void nvme_driver::flush(std::uint16_t qid) {
  std::lock_guard lock(mutex_);
  ring& r = io_ring(qid, "FLUSH");
  std::string what = "FLUSH on queue ";
  what += std::to_string(qid);
  execute(r, nvme::make_flush(0, options_.nsid), options_.io_timeout, what, 0, false);
}

// One command per max_transfer_bytes(). PRPs (4.3): PRP1 is the buffer's
// first byte (dword aligned); if the transfer ends in the next page PRP2 is
// that page, else PRP2 points at a list of the remaining pages, whose every
// page but the last chains to the next one through its last entry.
void nvme_driver::transfer(nvme::opcode op, std::uint16_t qid, std::uint64_t lba,
                           std::uint64_t count, const void* buffer) {
  std::lock_guard lock(mutex_);
  const char* name = opcode_name(op);
  ring& r = io_ring(qid, name);
  if (count == 0) return;
  if (lba >= identity_.blocks || count > identity_.blocks - lba) {
    std::string m = prefix();
    m += name;
    m += " of ";
    m += std::to_string(count);
    m += " blocks at LBA ";
    m += std::to_string(lba);
    m += " beyond the namespace's ";
    m += std::to_string(identity_.blocks);
    m += " blocks";
    throw invalid_argument(m, options_.name);
  }
  if (buffer == nullptr || (reinterpret_cast<std::uintptr_t>(buffer) & 3) != 0)
    throw invalid_argument(prefix() + name + ": the buffer must be dword aligned (PRP1)",
                           options_.name);
  const std::uint64_t per_command = max_transfer_ / identity_.block_size;
  auto* p = static_cast<std::byte*>(const_cast<void*>(buffer));
  auto* list = static_cast<std::uint64_t*>(prp_list_.ptr);
  while (count > 0) {
    const std::uint64_t n = std::min(count, per_command);
    const std::uint64_t bytes = n * identity_.block_size;
    nvme::command c = nvme::make_rw(op, 0, options_.nsid, lba, static_cast<std::uint32_t>(n), 0);
    c.prp1 = mem_.iova(p);
    c.prp2 = 0;
    const std::uint64_t first =
        std::min(bytes, page - (reinterpret_cast<std::uintptr_t>(p) % page));
    const std::uint64_t pages = (bytes - first + page - 1) / page;  // after the first
    std::byte* next = p + first;                                    // page aligned
    if (pages == 1) {
      c.prp2 = mem_.iova(next);
    } else if (pages > 1) {
      std::uint64_t* e = list;
      std::uint32_t slot = 0;
      for (std::uint64_t i = 0; i < pages; ++i) {
        if (slot == prp_entries_per_page - 1 && pages - i > 1) {
          e[slot] = mem_.iova(e + prp_entries_per_page);  // chain to the next list page
          e += prp_entries_per_page;
          slot = 0;
        }
        e[slot++] = mem_.iova(next + i * page);
      }
      c.prp2 = mem_.iova(list);
    }
    std::string what = name;
    what += " of ";
    what += std::to_string(n);
    what += n == 1 ? " block at LBA " : " blocks at LBA ";
    what += std::to_string(lba);
    what += " on queue ";
    what += std::to_string(qid);
    execute(r, c, options_.io_timeout, what, lba, true);
    p += bytes;
    lba += n;
    count -= n;
  }
}

// ---- shutdown ------------------------------------------------------------------

// 7.6.2: delete the I/O SQs, then the CQs; CC.SHN = 01b; wait for
// CSTS.SHST = 10b. CAP.TO bounds the wait (RTD3E would be finer; the model
// has none). A controller in fatal status gets no admin commands (they
// would only time out) and is disabled instead.
nvme_shutdown_report nvme_driver::shutdown() noexcept {
  std::lock_guard lock(mutex_);
  if (shut_down_) return report_;
  shut_down_ = true;
  auto problem = [&](const std::string& p) {
    if (!report_.problems.empty()) report_.problems += "; ";
    report_.problems += p;
  };
  try {
    const std::uint32_t s = csts();
    const bool broken = s == ~0u || (s & nvme_reg::csts_cfs) != 0;
    if (broken) {
      std::string p = "controller fatal status (CSTS ";
      p += hex(s);
      p += "): I/O queues not deleted";
      problem(p);
    } else {
      report_.queues_deleted = true;
      auto remove = [&](nvme::admin_opcode op, std::uint16_t qid, const char* what) {
        nvme::command c = admin_command(op);
        c.cdw10 = qid;
        std::string w = what;
        w += std::to_string(qid);
        try {
          admin_locked(c, w);
          return true;
        } catch (const std::exception& e) {
          report_.queues_deleted = false;
          problem(e.what());
          return false;
        }
      };
      for (ring& r : io_)
        if (r.created && remove(nvme::admin_opcode::delete_io_sq, r.qid, "Delete I/O SQ "))
          r.created = false;
      for (ring& r : io_)
        if (r.cq_created && !r.created &&
            remove(nvme::admin_opcode::delete_io_cq, r.qid, "Delete I/O CQ "))
          r.cq_created = false;
    }
    if (!broken) {
      const std::uint32_t cc = read32(nvme_reg::cc);
      write32(nvme_reg::cc, (cc & ~nvme_reg::cc_shn_mask) | nvme_reg::cc_shn_normal);
      const auto deadline = clock_type::now() + cap_.ready_timeout;
      for (;;) {
        const std::uint32_t now = csts();
        if ((now & nvme_reg::csts_shst_mask) == nvme_reg::csts_shst_complete) {
          report_.shutdown_complete = true;
          break;
        }
        if (now == ~0u || (now & nvme_reg::csts_cfs) != 0 || clock_type::now() >= deadline) {
          std::string p = "shutdown did not complete within CAP.TO (";
          p += ms_text(cap_.ready_timeout);
          p += "), CSTS ";
          p += hex(now);
          problem(p);
          break;
        }
        std::this_thread::sleep_for(50us);
      }
    }
    if (!report_.shutdown_complete) {
      // Stop the controller (and its DMA) by disabling it.
      write32(nvme_reg::cc, read32(nvme_reg::cc) & ~nvme_reg::cc_en);
      try {
        wait_ready(false, "disabling after an incomplete shutdown");
        report_.disabled = true;
      } catch (const std::exception& e) {
        problem(e.what());
      }
    }
  } catch (const std::exception& e) {
    problem(e.what());
  } catch (...) {
    problem("unknown error");
  }
  return report_;
}

}  // namespace warpstore
