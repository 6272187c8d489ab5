// Internal to the software NVMe controller (nvme_model.cpp,
// nvme_model_admin.cpp): the device thread's state, its engine and the
// helpers both halves use. Not part of any public header.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "controller/nvme_model.h"

namespace warpstore::nvme_model {

namespace detail {


inline std::uint64_t now_ns() {
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

inline nvme::status generic(std::uint8_t code, bool dnr = true) {
  return nvme::status::make(nvme::status_type::generic, code, dnr);
}
inline nvme::status specific(std::uint8_t code) {
  return nvme::status::make(nvme::status_type::command_specific, code);
}
inline nvme::status media(std::uint8_t code) {
  return nvme::status::make(nvme::status_type::media, code);
}

template <class T>
void put(std::byte* buf, std::size_t at, T v) {
  std::memcpy(buf + at, &v, sizeof v);
}
// An ASCII identify field: left-justified, padded with spaces.
inline void put_text(std::byte* buf, std::size_t at, std::size_t width, const char* s) {
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
inline nvme::status walk_prps(std::uint64_t prp1, std::uint64_t prp2, std::uint64_t bytes,
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

}  // namespace detail

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
  std::vector<detail::segment> segments;  // scratch of walk_prps
  std::vector<std::byte> identify;  // scratch of Identify
};

namespace detail {

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

}  // namespace detail
}  // namespace warpstore::nvme_model
