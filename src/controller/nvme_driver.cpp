// The user-space NVMe driver core (nvme_driver.h): DMA memory, registers,
// admin and I/O commands, the synchronous I/O helpers and shutdown (bring-up
// and queue creation: nvme_bring_up.cpp).
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

#include "controller/nvme_driver_impl.h"
#include "warpstore/error.h"

namespace warpstore {

using namespace detail::nvme_driver_impl;

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
