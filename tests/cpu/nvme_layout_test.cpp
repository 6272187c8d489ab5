#include <gtest/gtest.h>

#include <cstring>

#include "warpstore/nvme.h"

using namespace warpstore;

TEST(NvmeLayout, ReadCommandFields) {
  const nvme::command c = nvme::make_rw(nvme::opcode::read, 7, 1, 0x123456789ull, 8, 0x10000);
  std::uint8_t raw[64];
  std::memcpy(raw, &c, sizeof raw);
  EXPECT_EQ(raw[0], 0x02);  // opcode
  EXPECT_EQ(raw[2] | (raw[3] << 8), 7);  // CID in CDW0 31:16
  std::uint32_t cdw10, cdw11, cdw12;
  std::memcpy(&cdw10, raw + 40, 4);
  std::memcpy(&cdw11, raw + 44, 4);
  std::memcpy(&cdw12, raw + 48, 4);
  EXPECT_EQ(cdw10, 0x23456789u);
  EXPECT_EQ(cdw11, 0x1u);
  EXPECT_EQ(cdw12 & 0xFFFF, 7u);  // 0-based block count
  EXPECT_EQ(c.slba(), 0x123456789ull);
  EXPECT_EQ(c.nlb(), 8u);
  std::uint64_t prp1;
  std::memcpy(&prp1, raw + 24, 8);
  EXPECT_EQ(prp1, 0x10000u);
  EXPECT_EQ(c.prp2, 0x11000u);
}

TEST(NvmeLayout, CompletionDword3RoundTrips) {
  const nvme::status st = nvme::status::make(nvme::status_type::generic, nvme::sc::lba_out_of_range);
  const std::uint32_t dw3 = nvme::completion_dw3(513, st, true);
  EXPECT_EQ(nvme::dw3_cid(dw3), 513);
  EXPECT_TRUE(nvme::dw3_phase(dw3));
  EXPECT_EQ(nvme::dw3_status(dw3).code(), nvme::sc::lba_out_of_range);
  EXPECT_EQ(nvme::dw3_status(dw3).type(), nvme::status_type::generic);
  EXPECT_FALSE(nvme::dw3_status(dw3).success());
  // Status field is bits 31:17 of DW3, phase bit 16 (spec figure 90).
  EXPECT_EQ((dw3 >> 17) & 0xFF, nvme::sc::lba_out_of_range);
  nvme::completion e{};
  std::memcpy(reinterpret_cast<std::uint8_t*>(&e) + 12, &dw3, 4);
  EXPECT_EQ(e.cid, 513);
  EXPECT_EQ(e.status & 1, 1);
}

TEST(NvmeLayout, SuccessIgnoresDnrAndPhase) {
  EXPECT_TRUE(nvme::status::ok().success());
  EXPECT_TRUE(nvme::dw3_status(nvme::completion_dw3(0, nvme::status::ok(), true)).success());
  EXPECT_FALSE(nvme::status::make(nvme::status_type::media, nvme::sc::unrecovered_read).success());
}
