// warpstore-kv: the key-value store example, one source for both targets
// (kv_example_gpu.cu, kv_example_cpu.cpp). Creates a store, SETs batches of
// random keys (each batch a logged transaction), GETs every key back and
// checks it against a host map, then cuts a batch short after its data was
// flushed (a crash before the commit) and reopens the store: recovery must
// undo that batch, and every GET must again match the committed state.
//
//   warpstore-kv [--dir DIR] [--buckets N] [--batches N] [--batch-keys N]
//                [--universe N] [--seed N]     (controller etc.: WARPSTORE_*)
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "apps/kvstore/kvstore.cuh"
#include "warpstore/runtime.h"

namespace warpstore::kv {

template <class Launch>
int run_example(int argc, char** argv) {
  std::string dir;
  std::uint64_t buckets = 1 << 14, batches = 20, batch_keys = 4096, universe = 0, seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const std::uint64_t v = std::strtoull(argv[i + 1], nullptr, 0);
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--buckets") buckets = v;
    else if (a == "--batches") batches = v;
    else if (a == "--batch-keys") batch_keys = v;
    else if (a == "--universe") universe = v;
    else if (a == "--seed") seed = v;
    else {
      std::fprintf(stderr, "warpstore-kv: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (universe == 0) universe = 4 * batch_keys;
  bool own_dir = false;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    dir = std::string(tmp ? tmp : "/tmp") + "/warpstore-kv-XXXXXX";
    if (::mkdtemp(dir.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    own_dir = true;
  }
  options opts = options::from_environment();
  opts.writable = true;
  if (std::getenv("WARPSTORE_CACHE_BYTES") == nullptr) opts.cache_bytes = 64ull << 20;
  const std::string data = dir + "/kv.data", logp = dir + "/kv.log";
  durable::log_layout layout;
  layout.line_size = opts.line_size;
  // A region per warp of the logging launch, each with room for the
  // before-images its share of a batch logs (shares are groups of keys dealt
  // round robin: twice the even share). The CPU target runs few warps, so
  // its shares are large.
  const std::uint64_t warps = std::min<std::uint64_t>(256, Launch::max_warps());
  const std::uint64_t share = 2 * ((batch_keys + warps - 1) / warps + 1) *
                              durable::detail::entry_bytes(slot_bytes);
  layout.regions = static_cast<std::uint32_t>(warps);
  layout.region_bytes = std::max<std::uint64_t>(
      {4ull * opts.line_size, 64 << 10, (share / opts.line_size + 2) * opts.line_size});
  std::printf("warpstore-kv on %s: %llu buckets (%.1f MiB), %llu batches of %llu keys from %llu, "
              "controller %s, log %u regions of %llu KiB\n",
              runtime::device_name().c_str(), static_cast<unsigned long long>(buckets),
              file_bytes(buckets) / 1048576.0, static_cast<unsigned long long>(batches),
              static_cast<unsigned long long>(batch_keys), static_cast<unsigned long long>(universe),
              to_string(opts.controller), layout.regions,
              static_cast<unsigned long long>(layout.region_bytes >> 10));
  basic_store<Launch>::create(data, logp, buckets, layout, opts);

  std::unordered_map<std::uint64_t, value> model;
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull, refused = 0;
  auto next = [&] { return s = warpstore::detail::mix64(s + 1); };
  auto make_batch = [&](std::vector<std::uint64_t>& keys, std::vector<value>& values) {
    keys.resize(batch_keys);
    values.resize(batch_keys);
    for (std::uint64_t i = 0; i < batch_keys; ++i) {
      keys[i] = 1 + next() % universe;
      for (auto& w : values[i].w) w = next();
    }
  };
  std::vector<std::uint64_t> keys;
  std::vector<value> values;
  double set_secs = 0;
  {
    basic_store<Launch> st(data, logp, opts);
    for (std::uint64_t b = 0; b < batches; ++b) {
      make_batch(keys, values);
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<set_result> r = st.set(keys, values);
      set_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (r[i] == set_result::full) ++refused;
        else model[keys[i]] = values[i];
      }
    }
  }
  // Every key of the universe, read back; then a batch cut short and undone.
  std::vector<std::uint64_t> all(universe);
  for (std::uint64_t i = 0; i < universe; ++i) all[i] = i + 1;
  auto check = [&](basic_store<Launch>& st, double* secs) {
    std::vector<value> got;
    std::vector<std::uint8_t> found;
    const auto t0 = std::chrono::steady_clock::now();
    st.get(all, got, found);
    if (secs) *secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::uint64_t bad = 0;
    for (std::uint64_t i = 0; i < universe; ++i) {
      const auto it = model.find(all[i]);
      if ((it != model.end()) != (found[i] != 0)) ++bad;
      else if (found[i] && std::memcmp(&got[i], &it->second, sizeof(value)) != 0) ++bad;
    }
    return bad;
  };
  double get_secs = 0;
  std::uint64_t bad = 0;
  {
    basic_store<Launch> st(data, logp, opts);
    bad += check(st, &get_secs);
    make_batch(keys, values);
    st.set(keys, values, crash_point::after_data_flush);  // the crash: no commit
  }
  basic_store<Launch> st(data, logp, opts);
  const durable::recovery_report& rep = st.recovery();
  const std::uint64_t after = check(st, nullptr);
  bad += after;
  std::printf("SET: %.0f keys/s (%.3f s for %llu batches, each logged, applied, flushed and "
              "committed; %llu refused by full buckets)\n",
              batches * batch_keys / set_secs, set_secs, static_cast<unsigned long long>(batches),
              static_cast<unsigned long long>(refused));
  std::printf("GET: %.0f keys/s (%llu keys, %zu stored)\n", universe / get_secs,
              static_cast<unsigned long long>(universe), model.size());
  std::printf("crash after the data flush of batch %llu, reopened: recovery found %llu entries, "
              "undid %llu partial transaction(s), %llu before-images, %llu lines; store at batch %llu; "
              "%llu wrong GETs after recovery\n",
              static_cast<unsigned long long>(batches + 1), static_cast<unsigned long long>(rep.entries),
              static_cast<unsigned long long>(rep.partial_txns),
              static_cast<unsigned long long>(rep.undone_entries),
              static_cast<unsigned long long>(rep.lines_restored),
              static_cast<unsigned long long>(st.batches()), static_cast<unsigned long long>(after));
  const bool ok = bad == 0 && rep.partial_txns == 1 && st.batches() == batches;
  std::printf("%s: %llu mismatches\n", ok ? "verified" : "FAILED", static_cast<unsigned long long>(bad));
  if (own_dir) std::filesystem::remove_all(dir);
  return ok ? 0 : 3;
}

}  // namespace warpstore::kv
