// Benchmark results in the format of RESULTS.md: one JSON file per study
// (bench/results/<study>.json), built up by merging the entries of each run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "support/json.h"

namespace warpstore::bench {

// One measured figure.
struct result {
  std::string name;  // e.g. "block.host.random4k"; unique within a study
  double value = 0;
  std::string unit;  // "GB/s", "IOPS", ...
  // The ceiling measured in the same run; absent for entries that are
  // ceilings themselves (then ceiling, ceiling_name and ratio are null).
  std::optional<double> ceiling;
  std::string ceiling_name;
  bool verified = false;        // the run checked the data it moved
  std::uint64_t mismatches = 0; // wrong 8-byte words (or wrong results) found
  json::object params;

  // value / ceiling, when there is a positive ceiling.
  std::optional<double> ratio() const;
  json::value to_json() const;
};

// The header fields of a results file.
struct run_info {
  std::string study;
  std::string device;
  std::string date;     // UTC, yyyy-mm-dd
  std::string commit;   // WARPSTORE_COMMIT, else `git rev-parse HEAD`, else "unknown"
  std::string command;  // WARPSTORE_BENCH_COMMAND if set, else the command line

  // Fills date, commit and command for a run of `command_line` now.
  static run_info now(std::string study, std::string device, const std::string& command_line);
};

// Today's date in UTC as yyyy-mm-dd.
std::string utc_date();
// WARPSTORE_COMMIT if set, else `git rev-parse HEAD` run in `source_dir`, else "unknown".
std::string current_commit(const std::string& source_dir);
// "bench/results/core.json" -> "core".
std::string study_of(const std::string& path);

// Merges `results` into `existing` (a parsed results file, or null for
// none): header fields take the run's values; an entry whose name matches a
// new one is replaced where it stands, others are kept, new ones appended.
// Commands of earlier runs are kept, joined with " && ", so the file names
// every command that contributed to it; a run that replaces every earlier
// entry names its own command alone.
json::value merge_results(const json::value& existing, const run_info& run,
                          const std::vector<result>& results);

// merge_results on the file at `path` (created with its directories if
// missing), written atomically. Raises if the existing file is not valid JSON
// rather than overwrite it.
json::value write_results(const std::string& path, const run_info& run,
                          const std::vector<result>& results);

// Rounds to `digits` significant digits (JSON stays readable).
double round_significant(double v, int digits);
// Short human form for tables: 44.1, 0.862, 3.81 M.
std::string human_number(double v);
// Prints name, value, unit, ceiling, ratio, verified and mismatches as an aligned table.
std::string results_table(const std::vector<result>& results);

}  // namespace warpstore::bench
