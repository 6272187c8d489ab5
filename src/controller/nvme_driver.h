// The user-space NVMe driver core: what the `nvme` and `nvme-model`
// controllers do on the host, independent of VFIO and of the GPU data path.
//
// It brings a controller up exactly as NVMe 1.4 says (section 7.6.1:
// disable, admin queues, CC, enable; Identify; Set Features Number of
// Queues; Create I/O CQs and SQs), hands out descriptors of the I/O queue
// pairs (rings, entries, doorbell addresses) for the GPU data path to drive
// later, offers a simple synchronous read / write / flush for tests and for
// `warpstore load`, and shuts the controller down on close (CC.SHN).
//
// It touches the device through two seams only:
//  - nvme_bar: BAR0, mapped somewhere in this process. The software model
//    (nvme_model.h) gives its register file; vfio_device (vfio.h) gives the
//    mmap of the device's BAR0 region (VFIO_DEVICE_GET_REGION_INFO + mmap).
//  - dma_memory: memory the device can reach, and the address the device
//    must be given for it (its IOVA). host_dma_memory is ordinary host
//    memory whose IOVA is its virtual address, which is what the model
//    expects. vfio_dma_memory (vfio.h) allocates host memory and maps it
//    into the device's IOMMU domain with VFIO_IOMMU_MAP_DMA, answering
//    iova() from its own mapping table. Nothing in the driver assumes
//    iova == virtual address.
//
// Used by nvme_controller (nvme_controller.h), which owns a driver, maps the
// doorbells into the GPU and runs the GPU data path over its queue pairs:
// over the model (`controller="nvme-model"`) or over a device through VFIO
// (`controller="nvme"`, which has not run on a real device).
//
// Not done (by design, for now): interrupts (everything polls), more than
// one namespace (nsid is an option, one per driver), SGLs, metadata / end-to-end
// protection (a namespace whose LBA format carries metadata is refused),
// Abort, Get Log Page, asynchronous events, controller reset and recovery
// after CSTS.CFS (the caller drops the driver and builds a new one).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "warpstore/nvme.h"

namespace warpstore {

// Controller registers (Base Specification 1.4, section 3.1, figure 78) and
// the fields of them the driver uses.
namespace nvme_reg {
inline constexpr std::uint32_t cap = 0x00;   // 64-bit controller capabilities
inline constexpr std::uint32_t vs = 0x08;    // version
inline constexpr std::uint32_t cc = 0x14;    // controller configuration
inline constexpr std::uint32_t csts = 0x1C;  // controller status
inline constexpr std::uint32_t aqa = 0x24;   // admin queue attributes
inline constexpr std::uint32_t asq = 0x28;   // 64-bit admin SQ base
inline constexpr std::uint32_t acq = 0x30;   // 64-bit admin CQ base
inline constexpr std::uint32_t doorbells = 0x1000;

// CC (3.1.5).
inline constexpr std::uint32_t cc_en = 1u << 0;
inline constexpr std::uint32_t cc_css_shift = 4;   // 6:4, 000b: NVM command set
inline constexpr std::uint32_t cc_mps_shift = 7;   // 10:7, page 2^(12+MPS)
inline constexpr std::uint32_t cc_shn_shift = 14;  // 15:14, 01b: normal shutdown
inline constexpr std::uint32_t cc_shn_mask = 3u << cc_shn_shift;
inline constexpr std::uint32_t cc_shn_normal = 1u << cc_shn_shift;
inline constexpr std::uint32_t cc_iosqes_shift = 16;  // 19:16, log2 SQE size
inline constexpr std::uint32_t cc_iocqes_shift = 20;  // 23:20, log2 CQE size

// CSTS (3.1.6).
inline constexpr std::uint32_t csts_rdy = 1u << 0;
inline constexpr std::uint32_t csts_cfs = 1u << 1;
inline constexpr std::uint32_t csts_shst_mask = 3u << 2;
inline constexpr std::uint32_t csts_shst_complete = 2u << 2;

// Doorbells (3.1.24, 3.1.25): stride 4 << CAP.DSTRD.
constexpr std::uint32_t sq_tail_doorbell(std::uint16_t qid, std::uint32_t dstrd) {
  return doorbells + (2u * qid) * (4u << dstrd);
}
constexpr std::uint32_t cq_head_doorbell(std::uint16_t qid, std::uint32_t dstrd) {
  return doorbells + (2u * qid + 1u) * (4u << dstrd);
}
}  // namespace nvme_reg

// BAR0 of the controller, mapped into this process.
struct nvme_bar {
  std::byte* base = nullptr;
  std::size_t bytes = 0;
};

// Memory the controller can DMA to and from: queues, PRP lists, data
// buffers. The seam for VFIO (see the top of this file): an implementation
// returns zeroed, `align`-aligned memory whose IOVA range is contiguous (the
// driver asks for queues "physically contiguous", CDW11.PC = 1), keeps it
// pinned and mapped until free(), and translates any address inside such an
// allocation to the address the device uses. Mappings are whole 4 KiB pages,
// so iova(p) keeps p's offset in its page (PRP1 carries that offset, and
// the driver asks iova() page by page for the PRP entries after it).
class dma_memory {
 public:
  virtual ~dma_memory() = default;
  // Zeroed memory of `bytes`, aligned to `align` (a power of two); raises on failure.
  virtual void* alloc(std::size_t bytes, std::size_t align) = 0;
  // The device address of `p`, which lies in memory alloc() returned (or
  // memory the implementation otherwise knows to be mapped).
  virtual std::uint64_t iova(const void* p) const = 0;
  virtual void free(void* p) noexcept = 0;
};

// Host memory, IOVA == virtual address: for the software model, whose "DMA"
// is a memcpy in this process. Any host pointer is a valid data buffer.
class host_dma_memory final : public dma_memory {
 public:
  void* alloc(std::size_t bytes, std::size_t align) override;
  std::uint64_t iova(const void* p) const override;
  void free(void* p) noexcept override;
};

struct nvme_driver_options {
  // Names the controller in every message: a PCI address, a VFIO group, "model".
  std::string name = "nvme";
  std::uint32_t nsid = 1;                         // the namespace read_blocks etc. address
  std::uint16_t io_queues = 1;                    // I/O queue pairs asked for (Set Features)
  std::uint32_t io_queue_entries = 1024;          // per SQ and CQ, clamped to CAP.MQES + 1
  std::uint32_t admin_queue_entries = 32;         // clamped to CAP.MQES + 1 and 4096 (AQA)
  std::chrono::milliseconds admin_timeout{5000};  // per admin command
  std::chrono::milliseconds io_timeout{5000};     // per command of the I/O helpers
};

// What Identify Controller and Identify Namespace said.
struct nvme_identity {
  std::uint16_t vendor_id = 0;   // PCI vendor id (VID)
  std::string serial;            // SN, trailing spaces removed
  std::string model;             // MN
  std::string firmware;          // FR
  std::uint32_t version = 0;     // VS register: major 31:16, minor 15:8
  std::uint64_t mdts_bytes = 0;  // largest transfer the controller takes; 0: no limit
  std::uint32_t namespaces = 0;  // NN
  std::uint32_t block_size = 0;  // of the LBA format in use, bytes
  std::uint64_t blocks = 0;      // NSZE of the driver's namespace
};

// What CAP said (3.1.1).
struct nvme_capabilities {
  std::uint32_t max_queue_entries = 0;         // MQES + 1
  std::uint32_t doorbell_stride = 0;           // DSTRD: doorbells 4 << dstrd bytes apart
  std::chrono::milliseconds ready_timeout{0};  // TO * 500 ms
  bool contiguous_queues_required = false;     // CQR
};

// One I/O queue pair as the data path drives it: SQ and CQ qid, the rings
// (host virtual address and device address) and the two doorbells in the
// BAR. nvme_controller registers the BAR with the GPU (a device's with
// cudaHostRegisterIoMemory) and GPU threads write these doorbells.
struct nvme_queue_pair {
  std::uint16_t qid = 0;
  std::uint32_t entries = 0;       // both rings
  nvme::command* sq = nullptr;     // entries SQEs
  nvme::completion* cq = nullptr;  // entries CQEs
  std::uint64_t sq_iova = 0;
  std::uint64_t cq_iova = 0;
  std::uint32_t* sq_tail_doorbell = nullptr;
  std::uint32_t* cq_head_doorbell = nullptr;
};

// What shutdown() did; clean when every step succeeded.
struct nvme_shutdown_report {
  bool queues_deleted = false;     // every I/O SQ then CQ deleted
  bool shutdown_complete = false;  // CSTS.SHST reached "complete" within CAP.TO
  bool disabled = false;           // CC.EN = 0 was needed (shutdown incomplete) and RDY went 0
  std::string problems;            // what failed, one clause each
  bool clean() const { return queues_deleted && shutdown_complete; }
};

// Errors: warpstore::runtime_error whose info() carries the kind (io for a
// failed status, deadline for a wait that expired, runtime for a fatal or
// unusable controller), the status, the LBA where there is one, and the
// controller's name as path; the message names the controller, the command
// and the status ("READ of 8 blocks at LBA 17 on queue 1: unrecovered read
// error (sct 0x2, sc 0x81)"). invalid_argument for a call out of range.
//
// Thread safety: admin commands and the I/O helpers take one lock; the
// helpers keep one command in flight. A queue pair handed to the data path
// must not also be used through the helpers.
class nvme_driver {
 public:
  // Brings the controller up (see the top of this file) and creates
  // options.io_queues I/O queue pairs, or as many as the controller grants.
  // Raises (see above) if any step fails; what it set up is torn down first.
  // `mem` must outlive the driver.
  nvme_driver(nvme_bar bar, dma_memory& mem, nvme_driver_options options = {});
  // shutdown() unless done; never throws.
  ~nvme_driver();
  nvme_driver(const nvme_driver&) = delete;
  nvme_driver& operator=(const nvme_driver&) = delete;

  const nvme_identity& identity() const { return identity_; }
  const nvme_capabilities& capabilities() const { return cap_; }
  const nvme_driver_options& options() const { return options_; }
  std::uint16_t granted_queues() const { return granted_; }  // what Set Features granted
  const std::vector<nvme_queue_pair>& queue_pairs() const { return pairs_; }  // qid 1..n
  // Largest transfer of one command of the helpers: MDTS, the 16-bit block
  // count, and the helper's own 8 MiB cap, whichever is least.
  std::uint64_t max_transfer_bytes() const { return max_transfer_; }
  std::uint32_t csts() const;

  // One admin command (its cid is set here), waited for with
  // options.admin_timeout; raises naming `what` unless it succeeds.
  nvme::completion admin(nvme::command c, const std::string& what);

  // Synchronous I/O on queue pair `qid` (1..queue_pairs().size()) of the
  // driver's namespace: `count` blocks of identity().block_size at `lba`,
  // split into commands of at most max_transfer_bytes(). `buffer` is memory
  // the device can reach (from the driver's dma_memory), dword aligned.
  // Completions of abandoned (timed out) commands that arrive later are
  // retired and ignored; their buffers are the caller's to keep alive.
  void read_blocks(std::uint16_t qid, std::uint64_t lba, std::uint64_t count, void* buffer);
  void write_blocks(std::uint16_t qid, std::uint64_t lba, std::uint64_t count, const void* buffer);
  void flush(std::uint16_t qid = 1);

  // Deletes the I/O queues (SQs, then CQs), notifies shutdown (CC.SHN = 01b)
  // and waits for CSTS.SHST = complete within CAP.TO; if it does not
  // complete, disables the controller (CC.EN = 0) so it stops DMA before
  // the memory goes. Never throws; a second call returns the first report.
  nvme_shutdown_report shutdown() noexcept;

  // Completions retired whose cid was not the one awaited (late ones).
  std::uint64_t stale_completions() const { return stale_; }

 private:
  // Memory from dma_memory, freed on destruction.
  struct dma_block {
    dma_memory* mem = nullptr;
    void* ptr = nullptr;
    dma_block() = default;
    dma_block(dma_memory& m, std::size_t bytes, std::size_t align);
    dma_block(dma_block&& o) noexcept;
    dma_block& operator=(dma_block&& o) noexcept;
    ~dma_block();
  };
  // One queue pair's driver-side state.
  struct ring {
    std::uint16_t qid = 0;
    std::uint32_t entries = 0;
    dma_block sq_mem, cq_mem;
    nvme::command* sq = nullptr;
    nvme::completion* cq = nullptr;
    std::uint32_t tail = 0;     // next SQ slot
    std::uint32_t sq_head = 0;  // as the last CQE reported it
    std::uint32_t cq_head = 0;
    bool phase = true;  // the phase tag of a new CQE at cq_head
    std::uint16_t next_cid = 0;
    bool created = false;  // CQ and SQ exist on the controller
    bool cq_created = false;
  };

  void bring_up();
  void wait_ready(bool ready, const char* step);
  void teardown_after_failure() noexcept;
  void create_io_queues();
  ring make_ring(std::uint16_t qid, std::uint32_t entries);
  nvme::completion execute(ring& r, nvme::command c, std::chrono::milliseconds timeout,
                           const std::string& what, std::uint64_t lba, bool has_lba);
  void transfer(nvme::opcode op, std::uint16_t qid, std::uint64_t lba, std::uint64_t count,
                const void* buffer);
  nvme::completion admin_locked(const nvme::command& c, const std::string& what);
  ring& io_ring(std::uint16_t qid, const char* op);
  void check_fatal(const std::string& what) const;

  std::string prefix() const;  // "nvme <name>: "

  std::uint32_t read32(std::uint32_t offset) const;
  std::uint64_t read64(std::uint32_t offset) const;
  void write32(std::uint32_t offset, std::uint32_t value) const;
  void write64(std::uint32_t offset, std::uint64_t value) const;

  nvme_bar bar_;
  dma_memory& mem_;
  nvme_driver_options options_;
  nvme_capabilities cap_;
  nvme_identity identity_;
  std::uint16_t granted_ = 0;
  std::uint64_t max_transfer_ = 0;
  ring admin_;
  std::vector<ring> io_;  // io_[i] is qid i + 1
  std::vector<nvme_queue_pair> pairs_;
  dma_block prp_list_;  // PRP list pages of the helpers' one command in flight
  std::size_t prp_list_pages_ = 0;
  dma_block scratch_;  // one page: Identify data
  std::mutex mutex_;
  std::uint64_t stale_ = 0;
  bool shut_down_ = false;
  nvme_shutdown_report report_;
};

}  // namespace warpstore
