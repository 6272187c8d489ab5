// Small helpers every part of the host controller uses: the steady clock in
// nanoseconds, NVMe generic status codes, errno text, a polling spin, and how
// many io_uring completions one peek takes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>

#include "warpstore/nvme.h"

namespace warpstore::host_detail {

// io_uring completions taken per peek.
constexpr unsigned reap_batch = 64;

inline std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

constexpr nvme::status generic_status(std::uint8_t code) {
  return nvme::status::make(nvme::status_type::generic, code);
}

// One spin of a polling loop: tells the core we are waiting.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

inline std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

}  // namespace warpstore::host_detail
