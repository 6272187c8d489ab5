// The key-value crash workload, one source for both targets: the including
// file defines warpstore::crash::kv_launch (kv::cpu_launch or kv::gpu_launch).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

#include "tests/crash/kv_workload.h"
#include "support/pattern_file.h"

namespace warpstore::crash {

namespace {

using store = kv::basic_store<kv_launch>;

std::uint64_t mix(std::uint64_t z) { return warpstore::detail::mix64(z); }

durable::log_layout kv_log_layout(const options& opts) {
  durable::log_layout l;
  l.line_size = opts.line_size;
  l.regions = kv_shape::log_regions;
  l.region_bytes = std::max<std::uint64_t>(4ull * opts.line_size, 64 << 10);
  return l;
}

// Words of the file image as 64-byte slots.
kv::slot& slot_at(std::vector<std::byte>& image, std::uint64_t index) {
  return *reinterpret_cast<kv::slot*>(image.data() + index * kv::slot_bytes);
}

std::vector<std::byte> read_file(const std::string& path) {
  const tools::detail::fd_guard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw std::runtime_error("kv workload: cannot open " + path);
  std::vector<std::byte> out(static_cast<std::size_t>(::lseek(fd.get(), 0, SEEK_END)));
  out.resize(tools::detail::pread_all(fd.get(), reinterpret_cast<unsigned char*>(out.data()),
                                      out.size(), 0, path));
  return out;
}

// Applies batch k to the model image (same rules as the store: a key's
// bucket, its slot or the first free one; a full bucket refuses it).
void model_apply(std::vector<std::byte>& image, std::uint64_t seed, std::uint64_t k) {
  std::vector<std::uint64_t> keys;
  std::vector<kv::value> values;
  kv_batch(seed, k, keys, values);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::uint64_t b = kv::bucket_of(keys[i], kv_shape::buckets);
    kv::slot* target = nullptr;
    for (std::uint32_t j = 0; j < kv::bucket_slots && target == nullptr; ++j)
      if (slot_at(image, kv::slot_index(b, j)).key == keys[i]) target = &slot_at(image, kv::slot_index(b, j));
    for (std::uint32_t j = 0; j < kv::bucket_slots && target == nullptr; ++j)
      if (slot_at(image, kv::slot_index(b, j)).key == 0) target = &slot_at(image, kv::slot_index(b, j));
    if (target == nullptr) continue;
    target->key = keys[i];
    target->v = values[i];
  }
  slot_at(image, 0) = kv::header_slot(kv::make_header(kv_shape::buckets, k));
}

class kv_workload final : public workload {
 public:
  const char* name() const override { return "kv"; }

  void prepare(const env& e) override {
    store::create(kv_data_path(e), kv_log_path(e), kv_shape::buckets, kv_log_layout(e.opts), e.opts,
                  e.open);
  }

  void run(const env& e, std::uint64_t states, const committed_fn& committed) override {
    store s(kv_data_path(e), kv_log_path(e), e.opts, e.open);
    std::vector<std::uint64_t> keys;
    std::vector<kv::value> values;
    for (std::uint64_t k = s.batches() + 1; k <= states; ++k) {
      kv_batch(e.seed, k, keys, values);
      s.set(keys, values);
      committed(k);
    }
  }

  verdict recover(const env& e) override {
    verdict v;
    std::uint64_t claimed = 0;
    try {
      store s(kv_data_path(e), kv_log_path(e), e.opts, e.open);
      claimed = s.batches();
    } catch (const std::exception& ex) {
      v.mismatches = 1;
      v.detail = std::string("recovery failed: ") + ex.what();
      return v;
    }
    // The store is closed (every controller gone): the file itself is checked.
    const std::vector<std::byte> file = read_file(kv_data_path(e));
    const std::uint64_t limit = std::min<std::uint64_t>(claimed + 1, 1u << 16);
    std::vector<std::byte> model = kv_model(e.seed, 0);
    std::uint64_t matches = 0, best = ~0ull, best_k = 0, first_diff = 0;
    for (std::uint64_t k = 0; k <= limit; ++k) {
      if (k > 0) model_apply(model, e.seed, k);
      std::uint64_t diff = model.size() > file.size() ? model.size() - file.size() : 0;
      std::uint64_t first = ~0ull;
      const std::size_t n = std::min(model.size(), file.size());
      for (std::size_t i = 0; i < n; ++i)
        if (model[i] != file[i]) {
          ++diff;
          if (first == ~0ull) first = i;
        }
      if (diff == 0) {
        ++matches;
        v.state = k;
      }
      if (diff < best) {
        best = diff;
        best_k = k;
        first_diff = first;
      }
    }
    if (matches == 1) return v;
    v.state = best_k;
    v.mismatches = matches == 0 ? best : matches - 1;
    v.detail = matches == 0
                   ? "no committed state matches the data file: the closest is state " +
                         std::to_string(best_k) + " (" + std::to_string(best) +
                         " bytes differ, the first at byte " + std::to_string(first_diff) +
                         ", slot " + std::to_string(first_diff / kv::slot_bytes) +
                         "); the header claims " + std::to_string(claimed) + " batches"
                   : std::to_string(matches) + " committed states match the data file";
    return v;
  }
};

}  // namespace

std::string kv_data_path(const env& e) { return e.dir + "/kv.data"; }
std::string kv_log_path(const env& e) { return e.dir + "/kv.log"; }

void kv_batch(std::uint64_t seed, std::uint64_t k, std::vector<std::uint64_t>& keys,
              std::vector<kv::value>& values) {
  // A partial Fisher-Yates shuffle of the key universe: distinct keys, and
  // about a fifth of all keys per batch, so most batches overwrite keys of
  // earlier ones.
  std::vector<std::uint64_t> all(kv_shape::universe);
  std::iota(all.begin(), all.end(), 1);
  std::uint64_t s = mix(seed * 0x9E3779B97F4A7C15ull + k);
  keys.resize(kv_shape::batch_keys);
  values.resize(kv_shape::batch_keys);
  for (std::uint64_t i = 0; i < kv_shape::batch_keys; ++i) {
    s = mix(s + i);
    std::swap(all[i], all[i + s % (kv_shape::universe - i)]);
    keys[i] = all[i];
    for (int w = 0; w < 7; ++w) values[i].w[w] = mix(seed ^ (k << 20) ^ (keys[i] << 3) ^ w);
  }
}

std::vector<std::byte> kv_model(std::uint64_t seed, std::uint64_t k) {
  std::vector<std::byte> image(kv::file_bytes(kv_shape::buckets), std::byte{0});
  slot_at(image, 0) = kv::header_slot(kv::make_header(kv_shape::buckets, 0));
  for (std::uint64_t i = 1; i <= k; ++i) model_apply(image, seed, i);
  return image;
}

void kv_cut_batch(const env& e, kv::crash_point point) {
  store s(kv_data_path(e), kv_log_path(e), e.opts, e.open);
  std::vector<std::uint64_t> keys;
  std::vector<kv::value> values;
  kv_batch(e.seed, s.batches() + 1, keys, values);
  s.set(keys, values, point);
}

std::unique_ptr<workload> make_kv_workload() { return std::make_unique<kv_workload>(); }

}  // namespace warpstore::crash
