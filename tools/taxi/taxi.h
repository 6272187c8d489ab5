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

// The answer of Qk (k = 0..5) for trips with distance > threshold:
// count, sum of distances, and the sum over those trips of
// (column 1 + ... + column k) / distance in double (0 for Q0). Qk's answer is
// sum_ratio / count: for k = 5 the average fare per mile of long trips.
struct answer {
  std::uint64_t count = 0;
  double sum_distance = 0;
  double sum_ratio = 0;
};
// Computed on the CPU from columns in memory (columns[c][row]).
answer cpu_query(const std::vector<std::vector<float>>& cols, unsigned k, float threshold,
                 unsigned threads);
// The distance above which about `selectivity` of the rows lie (from a sample).
float threshold_for(const std::vector<float>& distance, double selectivity);

}  // namespace warpstore::taxi
