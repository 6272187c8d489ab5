// libFuzzer target: arbitrary submission entries and doorbell values fed to
// the host controller (built with clang -fsanitize=fuzzer,address,undefined
// when WARPSTORE_FUZZ=ON; scripts/reliability.sh runs it from the seed
// corpus in tests/fuzz/corpus/).
//
// Each input drives a fresh controller (one queue pair of depth 2 to 16 over
// a read-only pattern file, gpu_pull delivery) through a little program read
// from the input's bytes:
//   entry     an entry from the shared generator (tests/cpu/submission_fuzz.h)
//             written at our SQ tail, cid set by the protocol or left as made
//   raw       64 bytes of the input written at our SQ tail as they are
//   ring      the SQ tail doorbell rung with our tail
//   ring any  the SQ tail doorbell rung with a value from the input: within
//             the ring it hands the controller whatever the slots hold
//             (stale entries included); beyond it, it must be reported as a
//             bad doorbell and fetch nothing
//   bad head  the CQ head doorbell set beyond the ring while completions are
//             due: reported, nothing posted until a good value returns
// After every ring: every entry the doorbell handed over gets exactly one
// completion (bounded wait), with this queue's id, success exactly for the
// valid ones (must_succeed), the file's bytes for good reads; nothing extra
// is posted; the controller's command count matches. Any violation aborts,
// which libFuzzer reports as a crash with the input that caused it.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "controller/host_controller.h"
#include "submission_fuzz.h"
#include "support/pattern_file.h"
#include "support/raw_queue.h"

using namespace warpstore;

namespace {

constexpr std::uint64_t file_bytes = (256 << 10) + 700;  // a partial last block
constexpr auto completion_limit = std::chrono::seconds(10);

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "submission_fuzzer: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

const std::string& pattern_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string p =
        std::string(dir ? dir : "/tmp") + "/warpstore-fuzz-" + std::to_string(::getpid()) + ".bin";
    tools::write_pattern_file(p, file_bytes, 0, 1, {}, false);
    std::atexit([] { ::unlink(pattern_path().c_str()); });
    return p;
  }();
  return path;
}

// The input as a stream: bytes, then zeros once it runs out.
class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::uint64_t word() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return v;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

class session {
 public:
  explicit session(std::uint32_t depth)
      : opts_(make_options(depth)),
        ctl_(std::make_shared<backing_file>(pattern_path(), direct_io::off), opts_, 4096),
        qp_(ctl_.queues().view(0)),
        capacity_(ctl_.file().capacity_blocks()),
        q_(qp_),
        mask_(qp_.depth - 1) {}

  std::uint32_t mask() const { return mask_; }
  const queue_pair_ref& qp() const { return qp_; }
  std::uint64_t capacity() const { return capacity_; }
  std::uint32_t tail() const { return tail_; }

  // Room for one more entry before the doorbell must be rung.
  bool full() const { return ((tail_ + 1) & mask_) == head_; }
  bool pending() const { return tail_ != head_; }
  void write(const nvme::command& c) {
    q_.write_entry(tail_, c);
    tail_ = (tail_ + 1) & mask_;
  }

  // Rings the SQ tail doorbell with v <= mask and checks what comes back.
  void ring(std::uint32_t v, bool bad_head_first) {
    const std::uint32_t n = (v - head_) & mask_;
    std::vector<nvme::command> sent(n);
    for (std::uint32_t k = 0; k < n; ++k) sent[k] = qp_.sq[(head_ + k) & mask_];
    const bool was_failed = failed();
    if (bad_head_first) q_.ring_cq_value(mask_ + 1 + static_cast<std::uint32_t>(n));
    q_.ring_sq_value(v);
    if (bad_head_first) {
      // Completions are due (n > 0): the controller must see the bad head,
      // say so, and post nothing until it is good again.
      wait_failed("CQ head doorbell");
      if (!was_failed && n > 0 && nvme::dw3_phase(q_.dw3(cq_index_)) == phase_)
        fail("completion posted past a bad CQ head doorbell");
      q_.ring_cq_value(cq_index_);
    }
    std::vector<bool> matched(n, false);
    for (std::uint32_t k = 0; k < n; ++k) {
      if (!q_.wait_phase(cq_index_, phase_, completion_limit))
        fail("entry " + std::to_string(k) + " of " + std::to_string(n) + " never completed");
      const nvme::completion& e = q_.cqe(cq_index_);
      const std::uint32_t w = q_.dw3(cq_index_);
      if (e.sq_id != qp_.qid) fail("completion for queue " + std::to_string(e.sq_id));
      const std::uint16_t cid = nvme::dw3_cid(w);
      // The entry it answers: an unanswered one with this cid whose
      // outcome matches (entries may share a cid; they are told apart by
      // what they must get).
      std::uint32_t users = 0;
      for (std::uint32_t j = 0; j < n; ++j) users += sent[j].cid == cid;
      std::string why = "completion for cid " + std::to_string(cid) + " not rung or doubled";
      bool found = false;
      for (std::uint32_t j = 0; j < n && !found; ++j) {
        if (matched[j] || sent[j].cid != cid) continue;
        const std::string bad =
            test::check_completion(sent[j], w, qp_, capacity_, file_bytes, users == 1);
        if (bad.empty()) {
          matched[j] = true;
          found = true;
        } else {
          why = bad;
        }
      }
      if (!found) fail(why);
      cq_index_ = (cq_index_ + 1) & mask_;
      if (cq_index_ == 0) phase_ = !phase_;
    }
    q_.ring_cq_value(cq_index_);
    fetched_ += n;
    head_ = v;
    tail_ = v;
  }

  // Rings a value beyond the ring: reported, nothing fetched.
  void ring_bad(std::uint32_t v) {
    q_.ring_sq_value(v);
    wait_failed("SQ tail doorbell");
    q_.ring_sq_value(head_);
  }

  // Nothing more may be posted; the controller counted every command once.
  void finish() {
    if (q_.wait_phase(cq_index_, phase_, std::chrono::milliseconds(2)))
      fail("a completion nobody asked for");
    const auto deadline = std::chrono::steady_clock::now() + completion_limit;
    while (ctl_.stats().commands != fetched_) {
      if (std::chrono::steady_clock::now() > deadline)
        fail("controller counted " + std::to_string(ctl_.stats().commands) + " commands, " +
             std::to_string(fetched_) + " were rung");
      std::this_thread::yield();
    }
    if (!bad_doorbell_ && failed()) fail("controller failed without a bad doorbell");
  }

 private:
  static options make_options(std::uint32_t depth) {
    options o;
    o.queue_pairs = 1;
    o.queue_depth = depth;
    o.service_threads = 1;
    o.uring_depth = 16;
    o.direct = direct_io::off;
    o.deliver = delivery::gpu_pull;
    return o;
  }

  bool failed() const {
    try {
      ctl_.check();
      return false;
    } catch (const std::exception& e) {
      if (std::string(e.what()).find("doorbell") == std::string::npos)
        fail(std::string("controller failed: ") + e.what());
      return true;
    }
  }

  void wait_failed(const char* what) {
    bad_doorbell_ = true;
    const auto deadline = std::chrono::steady_clock::now() + completion_limit;
    while (!failed()) {
      if (std::chrono::steady_clock::now() > deadline)
        fail(std::string("bad ") + what + " not reported");
      std::this_thread::yield();
    }
  }

  options opts_;
  host_controller ctl_;
  queue_pair_ref qp_;
  std::uint64_t capacity_;
  test::raw_queue q_;
  std::uint32_t mask_;
  std::uint32_t head_ = 0;  // the controller's next fetch: our last good doorbell value
  std::uint32_t tail_ = 0;  // where we write the next entry
  std::uint32_t cq_index_ = 0;
  bool phase_ = true;
  bool bad_doorbell_ = false;
  std::uint64_t fetched_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  input in(data, size);
  session s(2u << (in.byte() % 4));  // depth 2, 4, 8 or 16
  for (unsigned ops = 0; ops < 64 && !in.empty(); ++ops) {
    const std::uint8_t op = in.byte();
    switch (op % 8) {
      case 0:
      case 1:
      case 2: {  // an entry from the generator
        if (s.full()) s.ring(s.tail(), false);
        nvme::command c =
            test::fuzz_entry([&] { return in.word(); }, s.qp(), s.tail(), s.capacity());
        if ((op & 0x80) == 0) c.cid = static_cast<std::uint16_t>(s.tail());
        s.write(c);
        break;
      }
      case 3: {  // raw bytes
        if (s.full()) s.ring(s.tail(), false);
        nvme::command c{};
        auto* bytes = reinterpret_cast<std::uint8_t*>(&c);
        for (std::size_t i = 0; i < sizeof c; ++i) bytes[i] = in.byte();
        s.write(c);
        break;
      }
      case 4:
      case 5:  // ring with our tail
        s.ring(s.tail(), false);
        break;
      case 6: {  // ring with any value
        const std::uint32_t v = (op & 0x80) ? in.word() & 0xFFFFFFFFu : in.byte();
        if (v <= s.mask())
          s.ring(v, false);
        else
          s.ring_bad(v);
        break;
      }
      default:             // a bad CQ head while completions are due
        if (!s.pending())  // one good FLUSH, to have a completion due
          s.write(nvme::make_flush(static_cast<std::uint16_t>(s.tail()), 1));
        s.ring(s.tail(), true);
        break;
    }
  }
  s.ring(s.tail(), false);
  s.finish();
  return 0;
}
