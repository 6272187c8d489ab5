// A GPU key-value store on a warpstore array, made crash-safe by the
// write-ahead log (include/warpstore/durable/log.cuh). Written once for the
// GPU and the CPU target: `Launch` runs a body on exactly the number of warps
// asked for, at most Launch::max_warps(), and waits (run_warps of
// warpstore/launch.cuh; apps/kvstore/launch.h: CPU threads; gpu_launch.cuh: a
// kernel).
//
// Data file: slots of 64 bytes (key, 56-byte value; key 0 = empty).
//   slots 0 .. 63      the header line (slot 0: magic, buckets, committed batches)
//   slots 64 + 32 b .. bucket b: 32 slots; a key lives in bucket
//                      mix64(key) % buckets, in the first free slot when it
//                      was inserted (a full bucket refuses new keys: `full`).
// Log file: a write-ahead log, one region per warp of the logging kernel.
//
// SET of a batch is one transaction (txn id = batch number):
//   1. kernel: one warp per touched bucket (keys grouped by bucket, batch
//      order kept) computes the bucket's new slots and appends the
//      before-image of every slot it will change (warp 0 also the header's)
//      to its own log region; host: log FLUSH;
//   2. kernel: the new slots (and the header with batches + 1) are stored
//      into the array; host: array flush (write-back + FLUSH);
//   3. host: log truncate (a new epoch: the commit point).
// Opening a store runs the log's recovery first: a batch cut short anywhere
// before 3 is undone, so the file holds exactly the batches committed.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "warpstore/array.cuh"
#include "warpstore/durable/log.cuh"

namespace warpstore::kv {

inline constexpr std::uint32_t slot_bytes = 64;
inline constexpr std::uint32_t bucket_slots = 32;
inline constexpr std::uint64_t header_slots = 64;  // the first 4 KiB
inline constexpr std::uint64_t store_magic = 0x3130564b53505257ull;  // "WRPSKV01"
inline constexpr std::uint32_t store_version = 1;

struct value {
  std::uint64_t w[7];
};
struct slot {
  std::uint64_t key;  // 0: empty
  value v;
};
static_assert(sizeof(slot) == slot_bytes, "a slot is 64 bytes");

// Slot 0 of the data file.
struct header {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t reserved0;
  std::uint64_t buckets;
  std::uint64_t batches;  // committed SET batches
  std::uint64_t reserved[3];
  std::uint64_t checksum;
};
static_assert(sizeof(header) == slot_bytes, "the header is one slot");

enum class set_result : std::uint8_t { updated = 0, inserted = 1, full = 2 };

WARPSTORE_HD inline std::uint64_t bucket_of(std::uint64_t key, std::uint64_t buckets) {
  return warpstore::detail::mix64(key ^ 0x5bd1e9955bd1e995ull) % buckets;
}
WARPSTORE_HD inline std::uint64_t slot_index(std::uint64_t bucket, std::uint32_t j) {
  return header_slots + bucket * bucket_slots + j;
}
inline std::uint64_t file_bytes(std::uint64_t buckets) {
  const std::uint64_t raw = (header_slots + buckets * bucket_slots) * slot_bytes;
  return (raw + 65535) / 65536 * 65536;  // whole lines of any line size
}
inline std::uint64_t header_checksum(const header& h) {
  durable::detail::hasher hs(store_magic);
  const auto* p = reinterpret_cast<const unsigned char*>(&h);
  for (int k = 0; k < 7; ++k) {
    std::uint64_t v;
    std::memcpy(&v, p + 8 * k, 8);
    hs.add(v);
  }
  return hs.h;
}
inline header make_header(std::uint64_t buckets, std::uint64_t batches) {
  header h{};
  h.magic = store_magic;
  h.version = store_version;
  h.buckets = buckets;
  h.batches = batches;
  h.checksum = header_checksum(h);
  return h;
}
inline slot header_slot(const header& h) {
  slot s;
  std::memcpy(&s, &h, sizeof s);
  return s;
}

// Where a SET batch stops when a test simulates a crash inside it.
enum class crash_point { none, after_log, after_apply, after_data_flush };

namespace detail {

// Kernel 1 of a SET: warp w takes groups w, w + warps, ...; each group is
// the keys of one bucket in batch order. Computes the new bucket, logs the
// before-image of each slot it changes into region w.
struct log_batch_body {
  array_ref<slot> table;
  durable::log_ref log;
  const std::uint64_t* keys;
  const value* values;
  const std::uint64_t* group_bucket;
  const std::uint32_t* group_first;  // [groups + 1]
  std::uint64_t groups;
  slot* before;  // [groups * 32]
  slot* after;   // [groups * 32]
  std::uint32_t* touched;  // [groups] bit j: slot j changes
  std::uint8_t* status;    // [keys]
  std::uint64_t txn;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    namespace w = warpstore::detail::warp;
    const unsigned mask = w::active_mask();
    const unsigned lanes = w::popcount(mask), rank = w::rank_in(mask, w::lane());
    const bool leader = rank == 0;
    const auto region = static_cast<std::uint32_t>(warp);
    if (warp == 0) {
      // The header changes in every batch: its before-image first.
      slot h{};
      if (leader) h = table[0];
      durable::log_entry e;
      e.kind = durable::entry_kind::undo;
      e.txn = txn;
      e.target = 0;
      e.payload = &h;
      e.payload_bytes = slot_bytes;
      log.append(mask, region, leader, e);
    }
    for (std::uint64_t g = warp; g < groups; g += warps) {
      const std::uint64_t b = group_bucket[g];
      slot* bef = before + g * bucket_slots;
      slot* aft = after + g * bucket_slots;
      for (std::uint32_t j = rank; j < bucket_slots; j += lanes) {
        const slot s = table[slot_index(b, j)];
        bef[j] = s;
        aft[j] = s;
      }
      w::sync(mask);
      std::uint32_t changed = 0;
      if (leader) {
        for (std::uint32_t i = group_first[g]; i < group_first[g + 1]; ++i) {
          std::uint32_t at = bucket_slots, free_at = bucket_slots;
          for (std::uint32_t j = 0; j < bucket_slots; ++j) {
            if (aft[j].key == keys[i]) {
              at = j;
              break;
            }
            if (aft[j].key == 0 && free_at == bucket_slots) free_at = j;
          }
          if (at != bucket_slots) {
            status[i] = static_cast<std::uint8_t>(set_result::updated);
          } else if (free_at != bucket_slots) {
            at = free_at;
            aft[at].key = keys[i];
            status[i] = static_cast<std::uint8_t>(set_result::inserted);
          } else {
            status[i] = static_cast<std::uint8_t>(set_result::full);
            continue;
          }
          aft[at].v = values[i];
          changed |= 1u << at;
        }
        touched[g] = changed;
      }
      changed = w::shfl(mask, changed, w::first_lane(mask));
      w::sync(mask);
      for (std::uint32_t base = 0; base < bucket_slots; base += lanes) {
        const std::uint32_t j = base + rank;
        const bool mine = j < bucket_slots && (changed >> j & 1u) != 0;
        durable::log_entry e;
        e.kind = durable::entry_kind::undo;
        e.txn = txn;
        e.target = slot_index(b, mine ? j : 0) * slot_bytes;
        e.payload = mine ? &bef[j] : nullptr;
        e.payload_bytes = slot_bytes;
        log.append(mask, region, mine, e);
      }
    }
    log.write_tail(mask, region);
  }
};

// Kernel 2 of a SET: the changed slots and the header into the array.
struct apply_body {
  array_ref<slot> table;
  const std::uint64_t* group_bucket;
  std::uint64_t groups;
  const slot* after;
  const std::uint32_t* touched;
  slot new_header;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    namespace w = warpstore::detail::warp;
    const unsigned mask = w::active_mask();
    const unsigned lanes = w::popcount(mask), rank = w::rank_in(mask, w::lane());
    if (warp == 0 && rank == 0) table.store(0, new_header);
    for (std::uint64_t g = warp; g < groups; g += warps) {
      const std::uint32_t t = touched[g];
      for (std::uint32_t j = rank; j < bucket_slots; j += lanes)
        if ((t >> j & 1u) != 0) table.store(slot_index(group_bucket[g], j), after[g * bucket_slots + j]);
    }
  }
};

// GET: warp per key; the lane holding the key's slot writes its value.
struct get_body {
  array_ref<slot> table;
  const std::uint64_t* keys;
  std::uint64_t n;
  std::uint64_t buckets;
  value* out;
  std::uint8_t* found;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    namespace w = warpstore::detail::warp;
    const unsigned mask = w::active_mask();
    const unsigned lanes = w::popcount(mask), rank = w::rank_in(mask, w::lane());
    for (std::uint64_t i = warp; i < n; i += warps) {
      const std::uint64_t b = bucket_of(keys[i], buckets);
      for (std::uint32_t j = rank; j < bucket_slots; j += lanes) {
        const slot s = table[slot_index(b, j)];
        if (s.key == keys[i]) {
          out[i] = s.v;
          found[i] = 1;
        }
      }
    }
  }
};

struct read_slot_body {
  array_ref<slot> table;
  std::uint64_t index;
  slot* out;
  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t) const {
    if (warp == 0 && warpstore::detail::warp::rank_in(warpstore::detail::warp::active_mask(),
                                                      warpstore::detail::warp::lane()) == 0)
      *out = table[index];
  }
};

struct write_slot_body {
  array_ref<slot> table;
  std::uint64_t index;
  slot v;
  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t) const {
    if (warp == 0 && warpstore::detail::warp::rank_in(warpstore::detail::warp::active_mask(),
                                                      warpstore::detail::warp::lane()) == 0)
      table.store(index, v);
  }
};

inline void make_file(const std::string& path, std::uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("kvstore: cannot create " + path);
  const bool ok = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("kvstore: cannot size " + path);
}

template <class T>
runtime::device_ptr<T> to_device(const std::vector<T>& v) {
  auto d = runtime::make_device<T>(std::max<std::size_t>(1, v.size()), false);
  if (!v.empty()) runtime::copy_to_device(d.get(), v.data(), v.size() * sizeof(T));
  return d;
}
template <class T>
std::vector<T> to_host(const runtime::device_ptr<T>& d, std::size_t n) {
  std::vector<T> v(n);
  if (n != 0) runtime::copy_to_host(v.data(), d.get(), n * sizeof(T));
  return v;
}

}  // namespace detail

using open_fn = std::function<std::shared_ptr<controller>(const std::string&, const options&)>;

template <class Launch>
class basic_store {
 public:
  // Creates the data and log files (any old content is lost): an empty
  // table of `buckets` buckets, batch 0 committed. Writes go through `open`'s
  // controllers (opts.writable is set here).
  static void create(const std::string& data_path, const std::string& log_path,
                     std::uint64_t buckets, const durable::log_layout& log_layout, options opts,
                     const open_fn& open = make_controller) {
    if (buckets == 0 || buckets > (1ull << 32))
      throw std::invalid_argument("kvstore: buckets must be between 1 and 2^32");
    opts.writable = true;
    log_layout.validate();
    if (log_layout.line_size != opts.line_size)
      throw std::invalid_argument("kvstore: the log's line size must be options::line_size");
    detail::make_file(data_path, file_bytes(buckets));
    detail::make_file(log_path, log_layout.file_bytes());
    durable::write_ahead_log::format(*open(log_path, opts), log_layout);
    array<slot> table(std::make_shared<cache>(opts), open(data_path, opts), 0, 0, opts);
    Launch{}(1, detail::write_slot_body{table.ref(), 0, header_slot(make_header(buckets, 0))});
    table.flush();
  }

  // Opens a store: recovery of the log first (undoing a batch a crash cut
  // short), then the header is checked.
  basic_store(const std::string& data_path, const std::string& log_path, options opts,
              const open_fn& open = make_controller)
      : opts_((opts.writable = true, opts)) {
    data_ctl_ = open(data_path, opts_);
    log_ = std::make_unique<durable::write_ahead_log>(open(log_path, opts_), opts_);
    recovery_ = log_->recover(data_ctl_.get());
    table_ = std::make_unique<array<slot>>(std::make_shared<cache>(opts_), data_ctl_, 0, 0, opts_);
    const slot s = read_slot(0);
    header h;
    std::memcpy(&h, &s, sizeof h);
    if (h.magic != store_magic || h.version != store_version || h.checksum != header_checksum(h))
      throw std::runtime_error("kvstore: " + data_path + " has no valid store header");
    if (h.buckets == 0 || file_bytes(h.buckets) > data_ctl_->file().size_bytes())
      throw std::runtime_error("kvstore: " + data_path + ": header names " +
                               std::to_string(h.buckets) + " buckets; the file holds " +
                               std::to_string(data_ctl_->file().size_bytes()) + " bytes");
    buckets_ = h.buckets;
    batches_ = h.batches;
  }

  std::uint64_t buckets() const { return buckets_; }
  std::uint64_t batches() const { return batches_; }  // committed SET batches
  const durable::recovery_report& recovery() const { return recovery_; }
  durable::write_ahead_log& log() { return *log_; }

  // SETs keys[i] = values[i] as one transaction (a key given twice: the
  // last one wins). Durable and committed when it returns. `crash` (tests)
  // stops inside the protocol as a crash would; the store is unusable then.
  std::vector<set_result> set(const std::vector<std::uint64_t>& keys,
                              const std::vector<value>& values, crash_point crash = crash_point::none) {
    if (broken_) throw std::logic_error("kvstore: a SET failed or was cut short; reopen the store");
    if (keys.size() != values.size())
      throw std::invalid_argument("kvstore: " + std::to_string(keys.size()) + " keys but " +
                                  std::to_string(values.size()) + " values");
    // The last occurrence of each key, grouped by bucket in batch order.
    std::unordered_map<std::uint64_t, std::size_t> last;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == 0) throw std::invalid_argument("kvstore: key 0 (at " + std::to_string(i) + ") is reserved");
      last[keys[i]] = i;
    }
    std::vector<std::size_t> order;
    order.reserve(last.size());
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (last[keys[i]] == i) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return bucket_of(keys[a], buckets_) < bucket_of(keys[b], buckets_);
    });
    std::vector<std::uint64_t> k(order.size()), gb;
    std::vector<value> v(order.size());
    std::vector<std::uint32_t> gf;
    for (std::size_t i = 0; i < order.size(); ++i) {
      k[i] = keys[order[i]];
      v[i] = values[order[i]];
      const std::uint64_t b = bucket_of(k[i], buckets_);
      if (gb.empty() || gb.back() != b) {
        gb.push_back(b);
        gf.push_back(static_cast<std::uint32_t>(i));
      }
    }
    gf.push_back(static_cast<std::uint32_t>(order.size()));
    const std::uint64_t groups = gb.size();
    const std::uint32_t regions = log_->layout().regions;
    const std::uint64_t warps =
        std::clamp<std::uint64_t>(std::min<std::uint64_t>(regions, groups), 1, Launch::max_warps());
    // The most a warp appends: one entry per changed slot, the header's.
    const std::uint64_t entry = durable::detail::entry_bytes(slot_bytes);
    std::vector<std::uint64_t> need(warps, 0);
    need[0] = entry;
    for (std::uint64_t g = 0; g < groups; ++g)
      need[g % warps] += entry * std::min<std::uint64_t>(bucket_slots, gf[g + 1] - gf[g]);
    const std::uint64_t most = *std::max_element(need.begin(), need.end());
    if (most + log_->layout().line_size > log_->layout().region_bytes)
      throw std::invalid_argument("kvstore: a batch of " + std::to_string(keys.size()) +
                                  " keys needs up to " + std::to_string(most) +
                                  " bytes of a log region of " +
                                  std::to_string(log_->layout().region_bytes) +
                                  ": use smaller batches or a larger log");
    broken_ = true;  // until this batch committed
    auto dk = detail::to_device(k);
    auto dv = detail::to_device(v);
    auto dgb = detail::to_device(gb);
    auto dgf = detail::to_device(gf);
    auto before = runtime::make_device<slot>(std::max<std::uint64_t>(1, groups) * bucket_slots);
    auto after = runtime::make_device<slot>(std::max<std::uint64_t>(1, groups) * bucket_slots);
    auto touched = runtime::make_device<std::uint32_t>(std::max<std::uint64_t>(1, groups));
    auto status = runtime::make_device<std::uint8_t>(std::max<std::size_t>(1, k.size()));
    const std::uint64_t txn = batches_ + 1;
    Launch{}(warps, detail::log_batch_body{table_->ref(), log_->ref(), dk.get(), dv.get(), dgb.get(),
                                           dgf.get(), groups, before.get(), after.get(),
                                           touched.get(), status.get(), txn});
    table_->check();
    log_->flush();  // the before-images are durable before any slot changes
    if (crash == crash_point::after_log) return {};
    Launch{}(std::clamp<std::uint64_t>(groups, 1,
                                       std::min<std::uint64_t>(4096, Launch::max_warps())),
             detail::apply_body{table_->ref(), dgb.get(), groups, after.get(), touched.get(),
                                header_slot(make_header(buckets_, txn))});
    if (crash == crash_point::after_apply) return {};
    table_->flush();
    if (crash == crash_point::after_data_flush) return {};
    log_->truncate();  // the commit point
    batches_ = txn;
    broken_ = false;
    const std::vector<std::uint8_t> st = detail::to_host(status, k.size());
    std::vector<set_result> out(keys.size());
    std::unordered_map<std::uint64_t, set_result> by_key;
    for (std::size_t i = 0; i < k.size(); ++i) by_key[k[i]] = static_cast<set_result>(st[i]);
    for (std::size_t i = 0; i < keys.size(); ++i) out[i] = by_key[keys[i]];
    return out;
  }

  // GETs every key: found[i] says whether keys[i] is stored, values[i] its value.
  void get(const std::vector<std::uint64_t>& keys, std::vector<value>& values,
           std::vector<std::uint8_t>& found) {
    if (broken_) throw std::logic_error("kvstore: a SET failed or was cut short; reopen the store");
    auto dk = detail::to_device(keys);
    auto dv = runtime::make_device<value>(std::max<std::size_t>(1, keys.size()));
    auto df = runtime::make_device<std::uint8_t>(std::max<std::size_t>(1, keys.size()));
    Launch{}(std::clamp<std::uint64_t>(keys.size(), 1,
                                       std::min<std::uint64_t>(4096, Launch::max_warps())),
             detail::get_body{table_->ref(), dk.get(), keys.size(), buckets_, dv.get(), df.get()});
    table_->check();
    values = detail::to_host(dv, keys.size());
    found = detail::to_host(df, keys.size());
  }

 private:
  slot read_slot(std::uint64_t index) {
    auto d = runtime::make_device<slot>(1);
    Launch{}(1, detail::read_slot_body{table_->ref(), index, d.get()});
    table_->check();
    return detail::to_host(d, 1)[0];
  }

  options opts_;
  std::shared_ptr<controller> data_ctl_;
  std::unique_ptr<durable::write_ahead_log> log_;
  durable::recovery_report recovery_;
  std::unique_ptr<array<slot>> table_;
  std::uint64_t buckets_ = 0;
  std::uint64_t batches_ = 0;
  bool broken_ = false;
};

}  // namespace warpstore::kv
