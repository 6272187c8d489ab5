// The NVMe driver core's bring-up (nvme_driver.h): reset, the admin queue,
// enable, Identify, the number of queues and the I/O queues, and the
// teardown of a bring-up that failed. Section numbers are those of the NVM
// Express Base Specification 1.4.
#include <algorithm>
#include <thread>
#include <utility>

#include "controller/nvme_driver.h"
#include "controller/nvme_driver_impl.h"
#include "warpstore/error.h"

namespace warpstore {

using namespace detail::nvme_driver_impl;

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

}  // namespace warpstore
