// warpstore-taxi: queries Q0..Q5 on a taxi-trip table (support/taxi/taxi.h),
// through warpstore (host controller over the column files in the page
// cache, only the lines of selected trips read) against the full-load
// baseline (every needed column read from its file and copied to GPU memory,
// reading the next column while the last one is copied, then one kernel).
// Every answer is checked exactly against the CPU's (integer sums, see
// support/taxi/taxi.h). Results: taxi.q<k>.sel<p>pct[.<layout>][.<tag>]
// .vs_fullload in bench/results/apps.json, rows per second end to end. Set-up outside the clocks on both sides: the baseline's GPU and
// pinned buffers, warpstore's controllers (one per column file, opened
// once); each warpstore query's clock includes creating a fresh cache.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "apps/graph/gpu_launch.cuh"
#include "apps/taxi/query.cuh"
#include "support/args.h"
#include "support/cli_main.h"
#include "support/graph/csr.h"
#include "support/results.h"
#include "support/setting_options.h"
#include "support/taxi/taxi.h"
#include "support/timing.h"
#include "warpstore/array.cuh"
#include "warpstore/cuda_check.h"

namespace {

using namespace warpstore;
namespace wb = warpstore::bench;

struct config {
  std::string dir;
  std::string layout;
  std::vector<unsigned> queries;
  double query_selectivity = 0.01;
  std::vector<double> sweep;
  // The library's settings: the environment, then --cache-bytes, --line-size,
  // --depth and --controller (the settings table). Staging is queues x depth
  // x line per column file.
  options store;
  std::uint64_t chunk_rows = 1024;  // rows a warp scans at a time, both sides
  std::string tag;                  // appended to the results' names
  // Every column's controller keeps its service threads busy during Q5: all
  // of them together must not outnumber the cores (16 on the GPU machine),
  // or threads polling for work take the CPU from threads that have it
  // (scripts/gpu.sh apps-tune: Q5 at 1 % went from 0.109 s with 8 + 5 x 2
  // threads to 0.062 s with 10 + 5 x 1).
  std::uint32_t distance_threads = 10;
  std::uint32_t column_threads = 1;
  unsigned threads = 16;
  std::string json;
  std::string command;
  // Variants that isolated the wrong-answer bug (array_ref::calling_mask).
  apps::further_read further = apps::further_read::divergent;
  bool cache_per_column = false;  // one cache per column instead of one shared
  unsigned repeat = 1;            // runs of each side per query (any wrong one counts; medians)
  bool diagnose = true;           // rerun with fewer columns after a wrong answer
};

struct timed_answer {
  taxi::answer a;
  double seconds = 0;
  std::uint64_t bytes_read = 0;
};

// The query's sums (apps::taxi_query) as an answer; raises if a chunk could
// not be read.
taxi::answer fetch(std::uint64_t* sums, const char* side) {
  std::uint64_t h[apps::query_sums];
  WARPSTORE_CUDA_TRY(cudaMemcpy(h, sums, sizeof h, cudaMemcpyDeviceToHost));
  if (h[3] != 0)
    throw std::runtime_error(std::string(side) + ": " + std::to_string(h[3]) +
                             " chunks of the distance column could not be read");
  taxi::answer a;
  a.count = h[0];
  a.sum_distance = h[1];
  a.sum_ratio = h[2];
  return a;
}

void clear(std::uint64_t* sums) {
  WARPSTORE_CUDA_TRY(cudaMemset(sums, 0, apps::query_sums * sizeof(std::uint64_t)));
}

// Buffers of the full-load baseline, allocated once.
struct fullload {
  std::uint64_t rows;
  std::vector<float*> device;
  float* staging[2] = {nullptr, nullptr};
  cudaEvent_t copied[2];
  cudaStream_t stream;

  explicit fullload(std::uint64_t r) : rows(r) {
    for (unsigned c = 0; c < taxi::columns.size(); ++c) {
      void* p = nullptr;
      WARPSTORE_CUDA_TRY(cudaMalloc(&p, rows * 4));
      device.push_back(static_cast<float*>(p));
    }
    for (auto*& s : staging) WARPSTORE_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&s), rows * 4));
    for (auto& e : copied) WARPSTORE_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    WARPSTORE_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ~fullload() {
    cudaStreamDestroy(stream);
    for (auto& e : copied) cudaEventDestroy(e);
    for (auto* s : staging) cudaFreeHost(s);
    for (auto* d : device) cudaFree(d);
  }

  timed_answer run(const config& cfg, unsigned k, float threshold, std::uint64_t* sums) {
    wb::stopwatch clock;
    for (unsigned c = 0; c <= k; ++c) {
      float* buf = staging[c % 2];
      if (c >= 2) WARPSTORE_CUDA_TRY(cudaEventSynchronize(copied[c % 2]));  // its last copy is done
      graph::read_file_range(taxi::column_path(cfg.dir, c), 0, rows * 4, buf, cfg.threads);
      WARPSTORE_CUDA_TRY(cudaMemcpyAsync(device[c], buf, rows * 4, cudaMemcpyHostToDevice, stream));
      WARPSTORE_CUDA_TRY(cudaEventRecord(copied[c % 2], stream));
    }
    WARPSTORE_CUDA_TRY(cudaStreamSynchronize(stream));
    apps::taxi_query<apps::plain_column> q{};
    for (unsigned c = 0; c < taxi::columns.size(); ++c) q.cols[c].data = device[c];
    q.k = k;
    q.threshold = threshold;
    q.rows = rows;
    q.chunk = cfg.chunk_rows;
    q.sums = sums;
    q.mode = cfg.further;  // the baseline checks the variant's query code
    clear(sums);
    apps::gpu_launch{}(q);
    timed_answer t{fetch(sums, "full load"), clock.seconds(), (k + 1) * rows * 4};
    return t;
  }
};

options store_options(const config& cfg, unsigned column) {
  options o = cfg.store;
  o.direct = direct_io::off;  // the page cache serves both sides
  o.service_threads = column == 0 ? cfg.distance_threads : cfg.column_threads;
  return o;
}

// One host controller per column file, opened once (as the baseline's
// buffers are allocated once): a query engine keeps its files open.
std::vector<std::shared_ptr<controller>> open_columns(const config& cfg) {
  std::vector<std::shared_ptr<controller>> ctls;
  for (unsigned c = 0; c < taxi::columns.size(); ++c)
    ctls.push_back(make_controller(taxi::column_path(cfg.dir, c), store_options(cfg, c)));
  return ctls;
}

// A fresh cache per query (nothing cached from the last one), timed.
timed_answer run_store(const config& cfg, const std::vector<std::shared_ptr<controller>>& ctls,
                       std::uint64_t rows, unsigned k, float threshold, std::uint64_t* sums) {
  wb::stopwatch clock;
  // One cache shared by the columns, or (--cache-per-column) one each.
  std::vector<std::shared_ptr<cache>> caches{std::make_shared<cache>(store_options(cfg, 0))};
  std::vector<std::unique_ptr<array<float>>> cols;
  apps::taxi_query<apps::store_column> q{};
  for (unsigned col = 0; col <= k; ++col) {
    if (cfg.cache_per_column && col != 0) caches.push_back(std::make_shared<cache>(store_options(cfg, col)));
    cols.push_back(std::make_unique<array<float>>(caches.back(), ctls[col], rows, 0, store_options(cfg, col)));
    q.cols[col].data = cols.back()->ref();
  }
  q.mode = cfg.further;
  q.k = k;
  q.threshold = threshold;
  q.rows = rows;
  q.chunk = cfg.chunk_rows;
  q.sums = sums;
  clear(sums);
  apps::gpu_launch{}(q);
  for (auto& a : cols) {
    a->check();
    a->shared_controller()->check();
  }
  timed_answer t{fetch(sums, "warpstore"), 0, 0};
  t.seconds = clock.seconds();
  for (const auto& c : caches) t.bytes_read += c->stats().bytes_read;
  return t;
}

// Wrong answers among `sides` (0, 1 or 2): each side's answer must equal
// the CPU's exactly (integer sums, support/taxi/taxi.h). What differs is
// printed per side and field, so a mismatch can be diagnosed from the log.
std::uint64_t mismatches(const std::string& name, const taxi::answer& want,
                         std::initializer_list<std::pair<const char*, taxi::answer>> sides) {
  std::uint64_t wrong = 0;
  for (const auto& [side, got] : sides) {
    const std::string d = taxi::differences(got, want);
    if (d.empty()) continue;
    ++wrong;
    std::printf("%s: %s answer WRONG: %s\n", name.c_str(), side, d.c_str());
  }
  return wrong;
}

// After a wrong answer: which further column first makes a side wrong,
// from the same query with fewer columns (Q1..Qk), printed for the log.
void diagnose(const config& cfg, fullload& base, const std::vector<std::shared_ptr<controller>>& ctls,
              const std::vector<std::vector<float>>& cols, unsigned k, float threshold, std::uint64_t* sums) {
  for (unsigned j = 1; j <= k; ++j) {
    const taxi::answer want = taxi::cpu_query(cols, j, threshold, cfg.threads);
    const std::string w = taxi::differences(run_store(cfg, ctls, base.rows, j, threshold, sums).a, want);
    const std::string b = taxi::differences(base.run(cfg, j, threshold, sums).a, want);
    std::printf("  diagnosis, same threshold with columns 1..%u (up to %s): warpstore %s; full load %s\n", j,
                taxi::columns[j], w.empty() ? "right" : w.c_str(), b.empty() ? "right" : b.c_str());
  }
  std::fflush(stdout);
}

apps::further_read parse_further(const std::string& s) {
  if (s == "operator") return apps::further_read::divergent;
  if (s == "converged") return apps::further_read::converged;
  if (s == "released") return apps::further_read::released;
  throw wb::usage_error("--further-read: operator, converged or released, not " + s);
}
const char* to_string(apps::further_read m) {
  switch (m) {
    case apps::further_read::divergent: return "operator";
    case apps::further_read::converged: return "converged";
    case apps::further_read::released: return "released";
  }
  return "?";
}

std::string sel_tag(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s * 100);
  return std::string("sel") + buf + "pct";
}

int run(const config& cfg) {
  const std::uint64_t rows = taxi::table_rows(cfg.dir);
  std::printf("table %s: %llu rows, %zu columns of float32 (%s each), layout %s\n", cfg.dir.c_str(),
              static_cast<unsigned long long>(rows), taxi::columns.size(), wb::format_size(rows * 4).c_str(),
              cfg.layout.c_str());
  wb::stopwatch total;
  std::vector<std::vector<float>> cols(taxi::columns.size(), std::vector<float>(rows));
  for (unsigned c = 0; c < cols.size(); ++c)
    graph::read_file_range(taxi::column_path(cfg.dir, c), 0, rows * 4, cols[c].data(), cfg.threads);
  std::printf("columns read for the CPU answers in %.2f s\n", total.seconds());

  std::vector<std::pair<unsigned, double>> runs;
  for (unsigned k : cfg.queries) runs.push_back({k, cfg.query_selectivity});
  for (double s : cfg.sweep)
    if (s != cfg.query_selectivity) runs.push_back({5, s});

  fullload base(rows);
  const std::vector<std::shared_ptr<controller>> ctls = open_columns(cfg);
  std::uint64_t* sums = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&sums, apps::query_sums * sizeof(std::uint64_t)));
  const wb::run_info info = wb::run_info::now("apps", runtime::device_name(), cfg.command);
  const std::string suffix = (cfg.layout == "zone" ? "" : "." + cfg.layout) + (cfg.tag.empty() ? "" : "." + cfg.tag);
  std::vector<wb::result> results;
  int status = 0;
  bool diagnosed = false;
  for (const auto& [k, sel] : runs) {
    const std::string name = "taxi.q" + std::to_string(k) + "." + sel_tag(sel) + suffix + ".vs_fullload";
    try {
      const float threshold = taxi::threshold_for(cols[0], sel);
      const taxi::answer want = taxi::cpu_query(cols, k, threshold, cfg.threads);
      timed_answer b = base.run(cfg, k, threshold, sums);
      timed_answer w = run_store(cfg, ctls, rows, k, threshold, sums);
      std::uint64_t bad = mismatches(name, want, {{"warpstore", w.a}, {"full load", b.a}});
      // --repeat: further runs of both sides, alternating, each checked; the
      // times reported are the medians.
      std::vector<double> times{w.seconds}, base_times{b.seconds};
      for (unsigned rep = 1; rep < cfg.repeat; ++rep) {
        const timed_answer base_again = base.run(cfg, k, threshold, sums);
        bad += mismatches(name + " (repeat " + std::to_string(rep) + ")", want,
                          {{"full load", base_again.a}});
        base_times.push_back(base_again.seconds);
        const timed_answer again = run_store(cfg, ctls, rows, k, threshold, sums);
        const std::uint64_t wrong = mismatches(name + " (repeat " + std::to_string(rep) + ")", want,
                                               {{"warpstore", again.a}});
        if (wrong && !bad) w = again;  // report the wrong run's answer
        bad += wrong;
        times.push_back(again.seconds);
      }
      if (times.size() > 1) {
        std::printf("%s: warpstore runs", name.c_str());
        for (double t : times) std::printf(" %.4f", t);
        std::printf(" s; full load runs");
        for (double t : base_times) std::printf(" %.4f", t);
        std::printf(" s (medians reported)\n");
        w.seconds = times[wb::median_index(times)];
        b.seconds = base_times[wb::median_index(base_times)];
      }
      if (bad) {
        status = 3;
        if (!diagnosed && cfg.diagnose) diagnose(cfg, base, ctls, cols, k, threshold, sums);  // once: it costs k reruns
        diagnosed = true;
      }
      const double answer = (k == 0 ? want.distance() : want.ratio()) / std::max<double>(1, want.count);
      std::printf("Q%u sel %-6g threshold %6.2f: %llu trips (%.3f %%), answer %.4f; full load %.3f s, "
                  "warpstore %.3f s (%s read), speedup %.2f, mismatches %llu\n",
                  k, sel, threshold, static_cast<unsigned long long>(want.count),
                  100.0 * static_cast<double>(want.count) / static_cast<double>(rows), answer, b.seconds,
                  w.seconds, wb::format_size(w.bytes_read).c_str(), b.seconds / w.seconds,
                  static_cast<unsigned long long>(bad));
      std::fflush(stdout);
      wb::result r;
      r.name = name;
      r.value = wb::round_significant(static_cast<double>(rows) / w.seconds / 1e9, 4);
      r.unit = "G rows/s (end to end)";
      r.ceiling = wb::round_significant(static_cast<double>(rows) / b.seconds / 1e9, 4);
      r.ceiling_name = "full load: read every needed column file + cudaMemcpy, then one kernel";
      r.verified = true;
      r.mismatches = bad;
      r.params = wb::json::object_builder()
                     .add("query", "Q" + std::to_string(k))
                     .add("rows", static_cast<unsigned long long>(rows))
                     .add("layout", cfg.layout)
                     .add("selectivity_target", sel)
                     .add("selected_rows", static_cast<unsigned long long>(want.count))
                     .add("threshold_miles", threshold)
                     .add("answer", answer)
                     .add("value_s", wb::round_significant(w.seconds, 4))
                     .add("ceiling_s", wb::round_significant(b.seconds, 4))
                     .add("warpstore_bytes_read", static_cast<unsigned long long>(w.bytes_read))
                     .add("fullload_bytes", static_cast<unsigned long long>(b.bytes_read))
                     .add("cache_bytes", static_cast<unsigned long long>(cfg.store.cache_bytes))
                     .add("line_size", cfg.store.line_size)
                     .add("chunk_rows", static_cast<unsigned long long>(cfg.chunk_rows))
                     .add("queue_depth", cfg.store.queue_depth)
                     .add("direct_io", "off (page cache, as the full load reads)")
                     .add("further_read", to_string(cfg.further))
                     .add("cache_per_column", cfg.cache_per_column)
                     .add("controller", warpstore::to_string(cfg.store.controller))
                     .add("repeat", cfg.repeat)
                     .add("service_threads", std::to_string(cfg.distance_threads) + " (distance), " +
                                                 std::to_string(cfg.column_threads) + " (each other column)")
                     .done();
      results.push_back(std::move(r));
      if (!cfg.json.empty()) wb::write_results(cfg.json, info, results);
    } catch (const std::exception& e) {
      std::printf("%s: FAILED: %s\n", name.c_str(), e.what());
      std::fflush(stdout);
      status = status ? status : 1;
    }
  }
  cudaFree(sums);
  std::printf("\n%s", wb::results_table(results).c_str());
  std::printf("total %.1f s\n", total.seconds());
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  wb::arg_parser p("warpstore-taxi", "Columnar queries Q0..Q5 through warpstore against loading whole columns");
  p.common()
      .positional("TABLE", "table directory (warpstore-taxigen)")
      .option("layout", "NAME", "zone",
              "the table's layout, as generated (names the results: zone is plain)")
      .option("queries", "LIST", "0,1,2,3,4,5", "queries run at --query-selectivity")
      .option("query-selectivity", "F", "0.01", "fraction of trips selected for --queries")
      .option("sweep", "LIST", "0.001,0.005,0.01,0.05,0.1,0.25,0.5",
              "selectivities Q5 is swept over")
      .option("chunk-rows", "N", "1024", "rows a warp scans at a time (both sides)")
      .option("tag", "NAME", "", "appended to the results' names (variants of the study)")
      .option("distance-threads", "N", "10",
              "host controller service threads for the distance column")
      .option("column-threads", "N", "1",
              "service threads for each further column (all columns' threads together: at most the "
              "cores)")
      .option("threads", "N", tools::hardware_threads(), "CPU threads reading files")
      .option("json", "PATH", std::string(WARPSTORE_SOURCE_DIR) + "/bench/results/apps.json",
              "results file to merge into (\"\" for none)")
      .option("further-read", "MODE", "operator",
              "how selected trips read further columns: operator (divergent lanes, column-0 line "
              "pinned), "
              "converged (all lanes, read_masked), released (column-0 line unpinned first)")
      .flag("cache-per-column", "one cache per column (each --cache-bytes) instead of one shared")
      .option("repeat", "N", "1",
              "runs of each side per query, alternating, each checked (medians reported)")
      .option("diagnose", "on|off", "on", "after a wrong answer, rerun with fewer further columns");
  // The library settings it sets, with this study's defaults (the table gives
  // the flags, their syntax and range checks).
  wb::declare_options(p.common(),
                      {{"cache_bytes", "2G", "warpstore cache"},
                       {"line_size", "64K",
                        "warpstore cache line size (every distance line is read: large lines mean "
                        "fewer requests)"},
                       {"queue_depth", "64",
                        "host controller queue depth (pinned staging per column: queues x depth x "
                        "line size)"},
                       {"controller", "host", "warpstore controller of each column file"}});
  return tools::cli_main(p, "warpstore-taxi", argc, argv, [&](const wb::parsed_args& a) {
    config c;
    c.dir = a.positional("TABLE");
    c.layout = taxi::to_string(taxi::parse_layout(a.str("layout")));
    for (const std::string& q : a.list("queries")) {
      const unsigned k = static_cast<unsigned>(wb::parse_size(q));
      if (k > 5) throw wb::usage_error("--queries: Q" + q + " does not exist (0..5)");
      c.queries.push_back(k);
    }
    c.query_selectivity = a.real("query-selectivity");
    for (const std::string& s : a.list("sweep")) c.sweep.push_back(std::stod(s));
    c.store = wb::apply_options(a);
    c.chunk_rows = std::max<std::uint64_t>(1, a.count("chunk-rows"));
    c.tag = a.str("tag");
    c.distance_threads = static_cast<std::uint32_t>(a.count("distance-threads"));
    c.column_threads = static_cast<std::uint32_t>(a.count("column-threads"));
    c.threads = static_cast<unsigned>(std::max<std::uint64_t>(1, a.count("threads")));
    c.json = a.str("json");
    c.command = a.command_line();
    c.further = parse_further(a.str("further-read"));
    c.cache_per_column = a.flag("cache-per-column");
    c.repeat = static_cast<unsigned>(std::max<std::uint64_t>(1, a.count("repeat")));
    const std::string d = a.str("diagnose");
    if (d != "on" && d != "off") throw wb::usage_error("--diagnose: on or off, not " + d);
    c.diagnose = d == "on";
    return run(c);
  });
}
