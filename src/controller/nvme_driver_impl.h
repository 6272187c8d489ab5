// Internal to the NVMe driver core (nvme_driver.cpp, nvme_bring_up.cpp):
// the page geometry it configures, polling, and the text and field helpers
// of its messages. Not part of any public header.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "controller/nvme_driver.h"
#include "warpstore/error.h"

namespace warpstore::detail::nvme_driver_impl {

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

inline std::uint64_t round_up(std::uint64_t v, std::uint64_t to) {
  return (v + to - 1) / to * to;
}

inline std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

inline std::string ms_text(std::chrono::milliseconds d) {
  std::string s = std::to_string(d.count());
  s += " ms";
  return s;
}

// An ASCII Identify field (space padded): trailing spaces and NULs removed.
inline std::string text_field(const std::byte* d, std::size_t at, std::size_t width) {
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

inline error_info info_of(error_kind kind, const std::string& name,
                          nvme::status st = nvme::status::ok(),
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
inline std::uint32_t load_dw3(const nvme::completion& e) {
  return std::atomic_ref<const std::uint32_t>(
             *reinterpret_cast<const std::uint32_t*>(reinterpret_cast<const unsigned char*>(&e) +
                                                     offsetof(nvme::completion, cid)))
      .load(std::memory_order_acquire);
}

inline const char* opcode_name(nvme::opcode op) {
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

inline nvme::command admin_command(nvme::admin_opcode op) {
  nvme::command c{};
  c.opc = static_cast<std::uint8_t>(op);
  return c;
}

}  // namespace warpstore::detail::nvme_driver_impl
