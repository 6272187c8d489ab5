// The software NVMe controller's admin commands (nvme_model.h): Identify,
// Set Features (number of queues), Create and Delete I/O CQ and SQ.
// Section numbers are those of the NVM Express Base Specification 1.4.
#include <algorithm>
#include <cstring>

#include "controller/nvme_model_engine.h"

namespace warpstore::nvme_model::detail {

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

}  // namespace warpstore::nvme_model::detail
