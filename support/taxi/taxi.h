// A taxi-trip-like table for the columnar study: one file per column, each a
// plain array of little-endian float32 (`<dir>/<column>.f32`), row r of
// every file is trip r. Every value is a pure function of (seed, row), so a
// reader can be checked against the generator.
//
// Layout. Trips are stored grouped by pickup zone (`zone` layout: runs of
// rows_per_zone consecutive rows share a zone, as in a table partitioned or
// sorted by pickup location), or with zones scattered row by row
// (`shuffled`). About 2 % of zones are airports, whose trips are long (8 to
// 30 miles); city trips are 0.3 to 12 miles. So a threshold above 12 miles
// selects rows clustered in the airport zones of the `zone` layout, and
// scattered rows in the `shuffled` one.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace warpstore::taxi {

// Q0 reads distance; Qk (k = 1..5) also reads the first k of the others.
inline constexpr std::array<const char*, 6> columns = {"distance", "fare", "extra",
                                                        "mta_tax", "tip", "tolls"};
inline constexpr std::uint64_t rows_per_zone = 1u << 16;

enum class layout { zone, shuffled };
layout parse_layout(const std::string& s);
const char* to_string(layout l);

struct trip {
  float distance, fare, extra, mta_tax, tip, tolls;
  float column(unsigned c) const;
};

// Trip `row` of the table made with `seed` and `l`.
trip make_trip(std::uint64_t row, std::uint64_t seed, layout l);

std::string column_path(const std::string& dir, unsigned column);
// Writes every column file of a `rows`-row table into `dir` (created).
void write_table(const std::string& dir, std::uint64_t rows, std::uint64_t seed, layout l,
                 unsigned threads);
// Rows of the table in `dir` (every column file must agree); raises otherwise.
std::uint64_t table_rows(const std::string& dir);

// Per-row terms, the same code on the CPU and the GPU. Every sum is exact
// and independent of the order it is taken in: a selected trip adds its
// distance and its ratio (column 1 + ... + column k) / distance, each in
// double with explicitly rounded operations (no FMA contraction, IEEE
// round-to-nearest on both), scaled by 2^fixed_bits and truncated to an
// integer; the integers are summed in uint64. So any difference between
// two answers is a different row read or selected, never summation order.
// Bound: a ratio is below 64 (at most $16 of columns 1..5 on a 0.3-mile
// trip, less per mile on longer ones) and a distance below 32, so a term is
// below 2^30 and 2^34 selected rows cannot overflow.
#if defined(__CUDACC__)
#define WARPSTORE_TAXI_HD __host__ __device__
#else
#define WARPSTORE_TAXI_HD
#endif
inline constexpr int fixed_bits = 24;
inline constexpr double fixed_one = 16777216.0;  // 2^fixed_bits

WARPSTORE_TAXI_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
WARPSTORE_TAXI_HD inline double div_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
// x * 2^fixed_bits (exact: a power of two) truncated; x >= 0.
WARPSTORE_TAXI_HD inline std::uint64_t to_fixed(double x) {
  return static_cast<std::uint64_t>(x * fixed_one);
}
WARPSTORE_TAXI_HD inline std::uint64_t distance_term(float d) { return to_fixed(static_cast<double>(d)); }
// `s` is column 1 + ... + column k of the trip, summed in order with add_rn.
WARPSTORE_TAXI_HD inline std::uint64_t ratio_term(double s, float d) {
  return to_fixed(div_rn(s, static_cast<double>(d)));
}

// The answer of Qk (k = 0..5) for trips with distance > threshold: count,
// sum of distance terms, sum of ratio terms (0 for Q0), all exact integers.
// Qk's answer is ratio() / count: for k = 5 the average fare per mile of
// long trips.
struct answer {
  std::uint64_t count = 0;
  std::uint64_t sum_distance = 0;  // fixed point, fixed_bits fraction bits
  std::uint64_t sum_ratio = 0;     // fixed point, fixed_bits fraction bits
  double distance() const { return static_cast<double>(sum_distance) / fixed_one; }
  double ratio() const { return static_cast<double>(sum_ratio) / fixed_one; }
};
// What differs between `got` and `want`, field by field with both values
// ("" if they agree exactly).
std::string differences(const answer& got, const answer& want);
// Computed on the CPU from columns in memory (columns[c][row]).
answer cpu_query(const std::vector<std::vector<float>>& cols, unsigned k, float threshold,
                 unsigned threads);
// The distance above which about `selectivity` of the rows lie (from a sample).
float threshold_for(const std::vector<float>& distance, double selectivity);

}  // namespace warpstore::taxi
