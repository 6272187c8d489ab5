// read_ahead: extents read whole where the misses are dense (read_ahead.h).
#include "controller/read_ahead.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "warpstore/detail/hash.cuh"
#include "warpstore/error.h"

namespace warpstore::host_detail {

read_ahead::read_ahead(std::uint32_t extent_bytes, std::uint32_t extents,
                       std::uint64_t file_bytes, std::uint32_t alignment)
    : extent_bytes_(extent_bytes),
      extents_(extents),
      file_bytes_(file_bytes),
      alignment_(std::max<std::uint32_t>(alignment, 1)),
      slots_(extents),
      loading_(std::make_unique<std::atomic<std::uint32_t>[]>(extents)),
      touches_(std::size_t{4096}) {
  if (extent_bytes == 0 || (extent_bytes & (extent_bytes - 1)) != 0 ||
      extent_bytes % alignment_ != 0 || extents == 0)
    throw invalid_argument("read_ahead: the extent (" + std::to_string(extent_bytes) +
                           " bytes) must be a power of two and a multiple of the O_DIRECT "
                           "alignment (" + std::to_string(alignment_) + "), with extents to hold");
  memory_ = static_cast<std::byte*>(
      std::aligned_alloc(std::max<std::size_t>(alignment_, 4096),
                         std::size_t{extent_bytes} * extents));
  if (memory_ == nullptr) throw std::bad_alloc();
  where_.reserve(extents * 2);
}

read_ahead::~read_ahead() {
  if (!leaked_) std::free(memory_);
}

std::uint32_t read_ahead::victim() {
  for (std::uint32_t steps = 0; steps < 2 * extents_; ++steps) {
    slot& s = slots_[hand_];
    const std::uint32_t at = hand_;
    hand_ = (hand_ + 1) % extents_;
    if (s.st == state::loading) continue;
    if (s.referenced) {
      s.referenced = false;
      continue;
    }
    return at;
  }
  return extents_;
}

read_ahead::verdict read_ahead::serve(std::uint64_t offset, std::uint32_t bytes, std::byte* dst,
                                      load& l) {
  const std::uint64_t extent = offset / extent_bytes_;
  std::lock_guard<std::mutex> lock(m_);
  if (const auto it = where_.find(extent); it != where_.end()) {
    slot& s = slots_[it->second];
    if (s.st == state::loading) {
      l.slot = it->second;
      return verdict::wait;
    }
    const std::uint64_t at = offset - extent * extent_bytes_;
    if (at + bytes > s.valid) return verdict::line;  // the extent read fell short of it
    std::memcpy(dst, memory_ + std::size_t{it->second} * extent_bytes_ + at, bytes);
    s.referenced = true;
    ++s.served;
    s.served_bytes += bytes;
    ++lines_;
    return verdict::copied;
  }
  // Not held: is the region dense enough to read whole?
  ++seq_;
  judge_old();
  touch& t = touches_[detail::murmur3_fmix64(extent) & (touches_.size() - 1)];
  if (t.extent == extent && seq_ - t.seq <= window)
    ++t.count;
  else
    t = touch{extent, seq_, 1};
  t.seq = seq_;
  if (t.count < trigger_for(bytes)) return verdict::line;
  const std::uint32_t v = victim();
  if (v == extents_) return verdict::line;
  slot& s = slots_[v];
  if (s.st == state::ready) {
    judge(s);
    where_.erase(s.extent);
  }
  ++loads_;
  s = slot{};
  s.extent = extent;
  s.st = state::loading;
  s.judged = false;
  s.loaded_seq = seq_;
  s.trigger = trigger_;
  s.line_bytes = bytes;
  unjudged_.emplace_back(v, seq_);
  loading_[v].store(1, std::memory_order_relaxed);
  where_.emplace(extent, v);
  t.count = 0;
  const std::uint64_t start = extent * extent_bytes_;
  // O_DIRECT reads whole aligned blocks: up to the file's end rounded up
  // (the read returns what exists).
  const std::uint64_t end_aligned = (file_bytes_ + alignment_ - 1) / alignment_ * alignment_;
  l.slot = v;
  l.offset = start;
  l.bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(extent_bytes_, end_aligned - start));
  l.buffer = memory_ + std::size_t{v} * extent_bytes_;
  return verdict::load;
}

std::uint32_t read_ahead::trigger_cap(std::uint32_t bytes) const {
  const std::uint32_t half = extent_bytes_ / std::max<std::uint32_t>(bytes, 1) / 2;
  return std::clamp(half, min_trigger, max_trigger);
}

std::uint32_t read_ahead::trigger_for(std::uint32_t bytes) const {
  return std::min(trigger_, trigger_cap(bytes));
}

void read_ahead::judge(slot& s) {
  if (s.judged) return;
  s.judged = true;
  // Read alone, its lines would have cost `served` requests and their
  // bytes; the extent cost one request and its bytes. x16: 16 is break-even.
  const std::uint64_t alone = std::uint64_t{s.served} * request_bytes + s.served_bytes;
  const std::uint64_t pays =
      std::min<std::uint64_t>(alone * 16 / (request_bytes + extent_bytes_), 64 * 16);
  // Only reads made under the trigger in force say what it yields.
  if (s.trigger != trigger_) return;
  pays_x16_ = static_cast<std::uint32_t>((std::uint64_t{pays_x16_} * 7 + pays) / 8);
  std::uint32_t next = trigger_;
  if (pays_x16_ < 16) {
    next = std::max(trigger_, std::min(trigger_ * 2, trigger_cap(s.line_bytes)));
  } else if (pays_x16_ >= 32 && trigger_ > min_trigger) {
    next = trigger_ - 1;
  }
  if (next != trigger_) {
    trigger_ = next;
    pays_x16_ = 24;  // the new trigger's reads decide its fate
  }
}

void read_ahead::judge_old() {
  while (!unjudged_.empty()) {
    const auto [v, read_at] = unjudged_.front();
    slot& s = slots_[v];
    if (s.loaded_seq == read_at && !s.judged) {
      if (s.st != state::ready || seq_ - s.loaded_seq <= 2 * window) return;
      judge(s);
    }
    unjudged_.pop_front();
  }
}

void read_ahead::loaded(std::uint32_t v, int result) {
  std::lock_guard<std::mutex> lock(m_);
  slot& s = slots_[v];
  if (result < 0 || s.stale) {
    where_.erase(s.extent);
    s = slot{};
  } else {
    s.valid = static_cast<std::uint32_t>(result);
    s.st = state::ready;
    s.referenced = true;  // a clock pass for the reads parked on it
  }
  loading_[v].store(0, std::memory_order_release);
}

void read_ahead::forget() {
  std::lock_guard<std::mutex> lock(m_);
  for (slot& s : slots_) {
    if (s.st == state::loading) {
      s.stale = true;  // its waiters ask again once it lands, and read the file
    } else if (s.st == state::ready) {
      judge(s);
      where_.erase(s.extent);
      s = slot{};
    }
  }
  std::fill(touches_.begin(), touches_.end(), touch{});
}

std::uint64_t read_ahead::loads() const {
  std::lock_guard<std::mutex> lock(m_);
  return loads_;
}

std::uint32_t read_ahead::trigger() const {
  std::lock_guard<std::mutex> lock(m_);
  return trigger_;
}

std::uint64_t read_ahead::lines() const {
  std::lock_guard<std::mutex> lock(m_);
  return lines_;
}

}  // namespace warpstore::host_detail
