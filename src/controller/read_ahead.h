// Read-ahead for the host controller's O_DIRECT reads: where a batch's misses
// are dense in the file, whole extents (options::read_ahead bytes, aligned)
// are read once and the lines inside them are copied out, as the kernel's
// readahead does for np.memmap; where they are sparse, each line is read
// alone, as before. Shared by the controller's service units. Private to
// src/controller/.
//
// Density is judged per extent: an extent that is not held is read whole
// once `trigger()` misses fell in it within the last `window` misses of the
// controller (a batch that touches most of a region sends its neighbours
// within a round; random rows over a large file seldom hit one extent three
// times that close together). The extents held are few (options::
// read_ahead_cache bytes) and replaced by a clock; a line served from one
// costs a copy of its bytes, not a system call.
//
// The trigger adapts to what extents yield. Each extent read is judged once
// its lines have had time to come (2 * window misses later, or when its slot
// is replaced): the lines it served would have cost, read alone, `served`
// requests plus their bytes, against one request plus the extent's bytes,
// a request counted as request_bytes of transfer. Where extents serve less
// than they cost (a batch that touches a tenth of a region: three misses in
// an extent, then a line or two more), the trigger doubles, up to half an
// extent's lines; where they serve twice their cost it steps back toward
// three. So a moderately dense batch reads its rows alone, as a sparse one
// does, and a dense one still reads extents.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace warpstore::host_detail {

class read_ahead {
 public:
  static constexpr std::uint32_t min_trigger = 3;
  static constexpr std::uint32_t max_trigger = 64;
  static constexpr std::uint64_t window = 512;
  // What one read request costs beside its bytes, in bytes of transfer: a
  // virtio disk reads 1.3-2 GB/s at about 100 K random requests a second
  // (13-20 KiB a request), an NVMe SSD 7 GB/s at about 1 M (7 KiB).
  static constexpr std::uint64_t request_bytes = 16u << 10;

  // extent_bytes: a power of two and a multiple of the file's O_DIRECT
  // alignment; extents: how many are held; file_bytes: the file's size.
  read_ahead(std::uint32_t extent_bytes, std::uint32_t extents, std::uint64_t file_bytes,
             std::uint32_t alignment);
  ~read_ahead();
  read_ahead(const read_ahead&) = delete;
  read_ahead& operator=(const read_ahead&) = delete;

  // An extent the caller is to read: `bytes` at `offset` into `buffer`, then
  // loaded(slot, result).
  struct load {
    std::uint32_t slot = 0;
    std::uint64_t offset = 0;
    std::uint32_t bytes = 0;
    std::byte* buffer = nullptr;
  };
  enum class verdict {
    copied,  // the line's bytes are in dst
    wait,    // its extent is being read into slot l.slot: ask again once it is not loading()
    load,    // read the extent (`l`), then ask again
    line,    // read the line itself
  };
  // For a READ of [offset, offset + bytes), all inside the file.
  verdict serve(std::uint64_t offset, std::uint32_t bytes, std::byte* dst, load& l);
  // The read of slot's extent ended with `result` (bytes read, or -errno:
  // the extent is forgotten, and its lines are read alone).
  void loaded(std::uint32_t slot, int result);
  // Whether slot's extent read is still in flight: a waiter polls this, which
  // takes no lock, and asks serve() again once it is false.
  bool loading(std::uint32_t slot) const {
    return loading_[slot].load(std::memory_order_acquire) != 0;
  }
  // Whether [offset, offset + bytes) lies in one extent and is small enough
  // for read-ahead to pay (at most a quarter of an extent).
  bool covers(std::uint64_t offset, std::uint32_t bytes) const {
    return bytes * 4 <= extent_bytes_ && offset / extent_bytes_ == (offset + bytes - 1) / extent_bytes_;
  }
  // Forgets every extent held, and any in flight when it lands (their bytes
  // may predate a change of the file): the next reads see the file as it
  // is now. controller::forget_file_bytes, with a cache clear.
  void forget();
  std::uint64_t loads() const;  // extents read whole
  std::uint64_t lines() const;  // lines served from them
  // Misses in one extent that read it whole now (min_trigger to
  // max_trigger; a request of `bytes` sees at most half the extent's lines).
  std::uint32_t trigger() const;
  // The kernel may still write into the extents (a unit could not drain):
  // their memory is never freed.
  void leak() noexcept { leaked_ = true; }

 private:
  enum class state : std::uint8_t { empty, loading, ready };
  struct slot {
    std::uint64_t extent = 0;
    std::uint32_t valid = 0;  // bytes read (ready)
    state st = state::empty;
    bool referenced = false;  // served a line since the clock last passed
    bool stale = false;       // loading when forget() was called: dropped on landing
    bool judged = true;       // its yield was counted (judge())
    std::uint64_t loaded_seq = 0;  // seq_ when it was read: one read a miss, so it names the read
    std::uint32_t served = 0;      // lines served since
    std::uint64_t served_bytes = 0;
    std::uint32_t trigger = 0;     // trigger_ when it was read
    std::uint32_t line_bytes = 0;  // the request that read it
  };
  struct touch {
    std::uint64_t extent = ~std::uint64_t{0};
    std::uint64_t seq = 0;  // the miss that last fell in it
    std::uint32_t count = 0;
  };
  // A slot to load `extent` into (the clock passes over loading slots and
  // referenced ones once), or extents_ when every one is being read.
  std::uint32_t victim();
  // Counts slot's yield into the trigger (once a read), under m_.
  void judge(slot& s);
  // Judges the extents read long enough ago, under m_.
  void judge_old();
  // The most the trigger means for requests of `bytes`: half the extent's
  // lines (min_trigger to max_trigger); the trigger such a request sees.
  std::uint32_t trigger_cap(std::uint32_t bytes) const;
  std::uint32_t trigger_for(std::uint32_t bytes) const;

  const std::uint32_t extent_bytes_;
  const std::uint32_t extents_;
  const std::uint64_t file_bytes_;
  const std::uint32_t alignment_;
  std::byte* memory_ = nullptr;
  bool leaked_ = false;
  mutable std::mutex m_;
  std::unordered_map<std::uint64_t, std::uint32_t> where_;  // extent -> slot
  std::vector<slot> slots_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> loading_;  // per slot: 1 while read
  std::uint32_t hand_ = 0;
  std::vector<touch> touches_;  // hashed by extent, a power of two entries
  std::uint64_t seq_ = 0;       // misses judged so far
  std::uint64_t loads_ = 0, lines_ = 0;
  std::uint32_t trigger_ = min_trigger;
  // Extent reads' yield against their cost, a moving average (x 1/16):
  // starts at break-even-and-a-half, so the first reads decide.
  std::uint32_t pays_x16_ = 24;
  std::deque<std::pair<std::uint32_t, std::uint64_t>> unjudged_;  // (slot, loaded_seq), oldest first
};

}  // namespace warpstore::host_detail
