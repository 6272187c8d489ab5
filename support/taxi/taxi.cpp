#include "support/taxi/taxi.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "support/graph/csr.h"
#include "warpstore/detail/hash.cuh"

namespace warpstore::taxi {
namespace {

// splitmix64's output for state x (the generated tables depend on it).
std::uint64_t mix(std::uint64_t x) { return detail::mix64(x + detail::golden_gamma); }

// Uniform in [0, 1) from 24 bits of `bits` starting at `shift`.
float unit(std::uint64_t bits, unsigned shift) {
  return static_cast<float>((bits >> shift) & 0xffffffu) * (1.0f / 16777216.0f);
}

bool is_airport(std::uint64_t zone, std::uint64_t seed) { return mix(seed ^ (zone * 0x51ed27u)) % 50 == 0; }

// Money rounded to cents, as fares are.
float cents(float x) { return std::round(x * 100.0f) / 100.0f; }

template <class Fn>
void parallel(unsigned threads, std::uint64_t n, Fn&& fn) {
  threads = std::max(1u, threads);
  std::vector<std::thread> pool;
  const std::uint64_t share = (n + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const std::uint64_t b = std::min(n, t * share), e = std::min(n, b + share);
    if (b < e) pool.emplace_back([&fn, b, e] { fn(b, e); });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

layout parse_layout(const std::string& s) {
  if (s == "zone") return layout::zone;
  if (s == "shuffled") return layout::shuffled;
  throw std::invalid_argument("taxi layout \"" + s + "\": expected zone or shuffled");
}
const char* to_string(layout l) { return l == layout::zone ? "zone" : "shuffled"; }

float trip::column(unsigned c) const {
  switch (c) {
    case 0: return distance;
    case 1: return fare;
    case 2: return extra;
    case 3: return mta_tax;
    case 4: return tip;
    case 5: return tolls;
  }
  throw std::out_of_range("taxi column " + std::to_string(c));
}

trip make_trip(std::uint64_t row, std::uint64_t seed, layout l) {
  const std::uint64_t zone = l == layout::zone ? row / rows_per_zone : mix(seed + row) % 4096;
  const bool airport = is_airport(zone, seed);
  const std::uint64_t r1 = mix(seed * 0x100000001b3ull + row), r2 = mix(r1);
  trip t{};
  const float u = unit(r1, 0);
  t.distance = airport ? 8.0f + 22.0f * u : 0.3f + 11.7f * u * u;
  t.distance = std::round(t.distance * 100.0f) / 100.0f;
  t.fare = cents(3.0f + 2.5f * t.distance + 2.0f * unit(r1, 24));
  const float e = unit(r2, 0);
  t.extra = e < 0.5f ? 0.0f : e < 0.8f ? 0.5f : 1.0f;
  t.mta_tax = 0.5f;
  t.tip = cents(t.fare * 0.25f * unit(r2, 24));
  t.tolls = (airport ? unit(r1, 48) < 0.5f : unit(r1, 48) < 0.03f) ? 6.55f : 0.0f;
  return t;
}

std::string column_path(const std::string& dir, unsigned column) {
  return dir + "/" + columns.at(column) + ".f32";
}

void write_table(const std::string& dir, std::uint64_t rows, std::uint64_t seed, layout l,
                 unsigned threads) {
  std::filesystem::create_directories(dir);
  std::vector<std::vector<float>> cols(columns.size(), std::vector<float>(rows));
  parallel(threads, rows, [&](std::uint64_t b, std::uint64_t e) {
    for (std::uint64_t r = b; r < e; ++r) {
      const trip t = make_trip(r, seed, l);
      for (unsigned c = 0; c < columns.size(); ++c) cols[c][r] = t.column(c);
    }
  });
  for (unsigned c = 0; c < columns.size(); ++c)
    graph::write_raw(column_path(dir, c), cols[c].data(), rows * 4, threads);
}

std::uint64_t table_rows(const std::string& dir) {
  std::uint64_t rows = 0;
  for (unsigned c = 0; c < columns.size(); ++c) {
    struct stat st {};
    const std::string p = column_path(dir, c);
    if (::stat(p.c_str(), &st) != 0) throw std::runtime_error("taxi table: no column file " + p);
    const std::uint64_t n = static_cast<std::uint64_t>(st.st_size) / 4;
    if (c == 0) rows = n;
    if (n != rows || st.st_size % 4 != 0)
      throw std::runtime_error("taxi table: " + p + " holds " + std::to_string(st.st_size) +
                               " bytes, expected " + std::to_string(rows * 4));
  }
  return rows;
}

answer cpu_query(const std::vector<std::vector<float>>& cols, unsigned k, float threshold,
                 unsigned threads) {
  std::vector<answer> parts(std::max(1u, threads));
  const std::uint64_t rows = cols[0].size();
  const std::uint64_t share = (rows + parts.size() - 1) / parts.size();
  parallel(static_cast<unsigned>(parts.size()), parts.size(), [&](std::uint64_t pb, std::uint64_t pe) {
    for (std::uint64_t p = pb; p < pe; ++p) {
      answer& a = parts[p];
      for (std::uint64_t r = p * share; r < std::min(rows, (p + 1) * share); ++r) {
        const float d = cols[0][r];
        if (!(d > threshold)) continue;
        ++a.count;
        a.sum_distance += distance_term(d);
        if (k == 0) continue;
        double s = 0;
        for (unsigned c = 1; c <= k; ++c) s = add_rn(s, cols[c][r]);
        a.sum_ratio += ratio_term(s, d);
      }
    }
  });
  answer total;
  for (const answer& a : parts) {
    total.count += a.count;
    total.sum_distance += a.sum_distance;
    total.sum_ratio += a.sum_ratio;
  }
  return total;
}

std::string differences(const answer& got, const answer& want) {
  std::string out;
  auto field = [&](const char* name, std::uint64_t g, std::uint64_t w, double scale) {
    if (g == w) return;
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s%s got %llu want %llu (%.9g vs %.9g, off by %.3g)", out.empty() ? "" : "; ",
                  name, static_cast<unsigned long long>(g), static_cast<unsigned long long>(w),
                  static_cast<double>(g) / scale, static_cast<double>(w) / scale,
                  (static_cast<double>(g) - static_cast<double>(w)) / scale);
    out += buf;
  };
  field("count", got.count, want.count, 1);
  field("sum_distance", got.sum_distance, want.sum_distance, fixed_one);
  field("sum_ratio", got.sum_ratio, want.sum_ratio, fixed_one);
  return out;
}

float threshold_for(const std::vector<float>& distance, double selectivity) {
  std::vector<float> sample;
  const std::uint64_t n = distance.size(), want = std::min<std::uint64_t>(n, 1u << 20);
  sample.reserve(want);
  for (std::uint64_t i = 0; i < want; ++i) sample.push_back(distance[mix(i) % n]);
  const auto at = static_cast<std::uint64_t>((1.0 - selectivity) * static_cast<double>(want - 1));
  std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(at), sample.end());
  return sample[at];
}

}  // namespace warpstore::taxi
