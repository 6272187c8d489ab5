// warpstore-graph: BFS, connected components, PageRank and SSSP on one CSR
// graph file, run the ways a user could run them, in one process, each
// result checked against the CPU reference:
//
//   hbm            the whole graph copied to GPU memory (read the file + cudaMemcpy)
//   zerocopy       the graph read into pinned host memory, kernels read it over PCIe
//   uvm            cudaMallocManaged with preferred location host (GPU faults on first touch)
//   memory         warpstore, memory controller (the file in pinned host memory)
//   host           warpstore, host controller (io_uring on the file in the page cache)
//   host-cold      the same after the file's pages are dropped (posix_fadvise DONTNEED)
//   zerocopy-cold  zerocopy after the pages are dropped
//
// "Load" is everything from the file to the first kernel (reading, pinning,
// copying, opening controllers and caches); "end to end" is load + compute.
// warpstore methods get a fresh cache per algorithm, at most --cache-fraction
// of the edge bytes. Results (bench/results/apps.json) compare methods by
// graph edges per second, end to end and compute only; the JSON is rewritten
// after every method so a run cut short keeps what it measured.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/graph/algorithms.cuh"
#include "apps/graph/gpu_launch.cuh"
#include "apps/graph/reference.h"
#include "support/args.h"
#include "support/cli_main.h"
#include "support/files.h"
#include "support/graph/csr.h"
#include "support/results.h"
#include "support/setting_options.h"
#include "support/table.h"
#include "support/timing.h"
#include "warpstore/array.cuh"
#include "warpstore/cuda_check.h"

namespace {

using namespace warpstore;
namespace wb = warpstore::bench;
namespace wg = warpstore::graph;

struct config {
  std::string path;
  std::vector<std::string> algorithms;
  std::vector<std::string> methods;
  std::vector<std::string> cold_algorithms;
  double cache_fraction = 0.25;
  // The library's settings: the environment, then --line-size and
  // --service-threads (the settings table).
  options store;
  std::uint32_t iterations = 5;
  bool cc_lower_only = true;  // CC reads only each sorted list's prefix below v
  unsigned threads = 16;
  std::string json;
  std::string dump;  // directory for the CPU references, for scripts/graph_check_scipy.py
  std::string command;
};

// One algorithm run by one method.
struct measurement {
  double load_s = 0;   // everything before the kernels (load_includes says what)
  double setup_s = 0;  // of which warpstore's cache and arrays (0 for the baselines)
  double compute_s = 0;
  std::uint32_t passes = 0;
  std::uint64_t mismatches = 0;
  std::string first_mismatch;
  cache_stats cache{};
  bool has_cache = false;
  double e2e() const { return load_s + compute_s; }
};

// The CPU references, computed once.
struct references {
  std::uint32_t source = 0;
  std::vector<std::uint32_t> bfs, cc;
  std::vector<double> pagerank;
  std::vector<float> sssp;
};

// A vertex with edges, chosen from the seed: BFS and SSSP start there.
std::uint32_t pick_source(const wg::csr& g) {
  std::uint64_t best = 0;
  for (std::uint64_t v = 0; v < g.vertices && v < 4096; ++v)
    if (g.degree(v) > g.degree(best)) best = v;
  return static_cast<std::uint32_t>(best);
}

template <class G>
measurement run_algorithm(const std::string& algo, const G& view, const references& ref,
                          const config& cfg) {
  apps::gpu_launch launch;
  apps::run_stats st;
  measurement m;
  wb::stopwatch clock;
  apps::reference::comparison c;
  if (algo == "bfs") {
    auto got = apps::run_bfs(launch, view, ref.source, &st);
    m.compute_s = clock.seconds();
    c = apps::reference::compare_exact(got, ref.bfs);
  } else if (algo == "cc") {
    auto got = apps::run_cc(launch, view, &st, cfg.cc_lower_only);
    m.compute_s = clock.seconds();
    c = apps::reference::compare_exact(got, ref.cc);
  } else if (algo == "pagerank") {
    auto got = apps::run_pagerank(launch, view, cfg.iterations, 0.85f, &st);
    m.compute_s = clock.seconds();
    c = apps::reference::compare_close(got, ref.pagerank, 2e-3, 1e-3 / static_cast<double>(view.vertices));
  } else if (algo == "sssp") {
    auto got = apps::run_sssp(launch, view, ref.source, &st);
    m.compute_s = clock.seconds();
    c = apps::reference::compare_exact(got, ref.sssp);
  } else {
    throw wb::usage_error("unknown algorithm " + algo + " (bfs, cc, pagerank, sssp)");
  }
  m.passes = st.passes;
  m.mismatches = c.mismatches;
  m.first_mismatch = c.first;
  return m;
}

// The graph's sections in one buffer laid out as in the file.
struct loaded_graph {
  wg::csr_header h{};
  std::function<void(void*)> free;  // set together with base
  char* base = nullptr;

  loaded_graph() = default;
  loaded_graph(const loaded_graph&) = delete;
  loaded_graph& operator=(const loaded_graph&) = delete;
  ~loaded_graph() {
    if (base != nullptr) free(base);
  }
  apps::plain_graph view() const {
    return {h.vertices, reinterpret_cast<const std::uint64_t*>(base + h.offsets_at),
            reinterpret_cast<const std::uint32_t*>(base + h.neighbours_at),
            h.is_weighted() ? reinterpret_cast<const float*>(base + h.weights_at) : nullptr};
  }
};

// Reads the file's sections (the header page is skipped) into `dst`.
void read_sections(const config& cfg, const wg::csr_header& h, char* dst) {
  wg::read_file_range(cfg.path, h.offsets_at, h.file_bytes - h.offsets_at, dst + h.offsets_at,
                      cfg.threads);
}

// Loads the graph for a plain-pointer method; returns the load time.
double load_plain(const std::string& method, const config& cfg, const wg::csr_header& h,
                  loaded_graph& g) {
  g.h = h;
  wb::stopwatch clock;
  if (method == "hbm") {
    // Pageable staging, as a program reading a file would have.
    const auto staging = std::make_unique_for_overwrite<char[]>(h.file_bytes);
    read_sections(cfg, h, staging.get());
    void* d = nullptr;
    WARPSTORE_CUDA_TRY(cudaMalloc(&d, h.file_bytes));
    g.base = static_cast<char*>(d);
    g.free = [](void* p) { cudaFree(p); };
    WARPSTORE_CUDA_TRY(cudaMemcpy(g.base + h.offsets_at, staging.get() + h.offsets_at,
                                  h.file_bytes - h.offsets_at, cudaMemcpyHostToDevice));
  } else if (method == "zerocopy" || method == "zerocopy-cold") {
    void* p = nullptr;
    WARPSTORE_CUDA_TRY(cudaHostAlloc(&p, h.file_bytes, cudaHostAllocMapped));
    g.base = static_cast<char*>(p);
    g.free = [](void* q) { cudaFreeHost(q); };
    read_sections(cfg, h, g.base);
  } else if (method == "uvm") {
    std::size_t free_bytes = 0, total = 0;
    WARPSTORE_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
    if (h.file_bytes > free_bytes)
      throw std::runtime_error("uvm: the graph (" + wb::format_size(h.file_bytes) +
                               ") is larger than the GPU's free memory (" + wb::format_size(free_bytes) + ")");
    void* p = nullptr;
    WARPSTORE_CUDA_TRY(cudaMallocManaged(&p, h.file_bytes));
    g.base = static_cast<char*>(p);
    g.free = [](void* q) { cudaFree(q); };
    // Host-preferred, as a user would set up unified memory over a file, and
    // nothing else: the GPU faults the pages it touches (no AccessedBy
    // mapping, no read-mostly copies).
    cudaMemLocation host{};
    host.type = cudaMemLocationTypeHost;
    WARPSTORE_CUDA_TRY(cudaMemAdvise(p, h.file_bytes, cudaMemAdviseSetPreferredLocation, host));
    read_sections(cfg, h, g.base);
  } else {
    throw wb::usage_error("unknown method " + method);
  }
  return clock.seconds();
}

// warpstore: the three sections as arrays over one controller and one cache.
struct store_setup {
  std::shared_ptr<cache> c;
  std::unique_ptr<array<std::uint64_t>> offsets;
  std::unique_ptr<array<std::uint32_t>> neighbours;
  std::unique_ptr<array<float>> weights;

  apps::store_graph view(const wg::csr_header& h) const {
    return {h.vertices, offsets->ref(), neighbours->ref(),
            weights ? weights->ref() : array_ref<float>{}, weights != nullptr};
  }
  void check() const {
    offsets->check();
    neighbours->check();
    if (weights) weights->check();
  }
};

options store_options(const config& cfg, const wg::csr_header& h, controller_kind kind) {
  options o = cfg.store;
  o.controller = kind;
  o.cache_bytes = static_cast<std::size_t>(cfg.cache_fraction * static_cast<double>(h.edge_bytes())) /
                  (o.line_size * o.ways) * (o.line_size * o.ways);
  // The memory controller has no service threads: make_controller takes its
  // file-loading threads from service_threads, so it gets the CPU threads
  // the baselines read the file with.
  if (kind == controller_kind::memory) o.service_threads = cfg.threads;
  o.direct = direct_io::off;  // buffered: the page cache is part of the measurement
  return o;
}

// What each method's load clock covers and how it reads the file, for the
// results' params: both sides of a ratio are read from the same page cache
// (the cold methods from disk through it, after dropping the file's pages).
std::string load_includes(const std::string& method, const config& cfg) {
  const std::string t = std::to_string(cfg.threads) + " threads";
  if (method == "hbm") return "buffered file read (" + t + ") into pageable memory, cudaMalloc, cudaMemcpy";
  if (method == "zerocopy") return "cudaHostAlloc(mapped), buffered file read (" + t + ")";
  if (method == "zerocopy-cold")
    return "pages dropped (fadvise DONTNEED), cudaHostAlloc(mapped), buffered file read from disk (" + t + ")";
  if (method == "uvm") return "cudaMallocManaged (host preferred), buffered file read (" + t + ")";
  if (method == "memory")
    return "memory controller: the read-only file's page-cache pages mapped (MAP_POPULATE) and pinned "
           "(cudaHostRegister), or where that is refused cudaHostAlloc(mapped) and a buffered pread (" +
           t + "); cache and arrays";
  if (method == "host")
    return "host controller open (O_DIRECT off: reads served by the page cache); cache and arrays";
  if (method == "host-cold")
    return "pages dropped (fadvise DONTNEED), host controller open (O_DIRECT off: buffered reads from disk "
           "through the page cache); cache and arrays";
  return method;
}

store_setup open_store(const options& o, const wg::csr_header& h, std::shared_ptr<controller> ctl) {
  store_setup s;
  s.c = std::make_shared<cache>(o);
  s.offsets = std::make_unique<array<std::uint64_t>>(s.c, ctl, h.vertices + 1, h.offsets_at, o);
  s.neighbours = std::make_unique<array<std::uint32_t>>(s.c, ctl, h.edges, h.neighbours_at, o);
  if (h.is_weighted()) s.weights = std::make_unique<array<float>>(s.c, ctl, h.edges, h.weights_at, o);
  return s;
}

using table_of = std::map<std::string, std::map<std::string, measurement>>;  // method -> algo

// The named comparisons (warpstore against each baseline), for every pair that was measured.
std::vector<wb::result> comparisons(const table_of& t, const config& cfg, const wg::csr_header& h) {
  struct pair_spec {
    const char* method;
    const char* against;
    const char* name;
  };
  static const pair_spec pairs[] = {
      {"memory", "zerocopy", "memory.vs_zerocopy"}, {"host", "zerocopy", "host.vs_zerocopy"},
      {"host", "uvm", "host.vs_uvm"},               {"memory", "hbm", "memory.vs_hbm"},
      {"host", "hbm", "host.vs_hbm"},               {"zerocopy", "hbm", "zerocopy.vs_hbm"},
      {"uvm", "zerocopy", "uvm.vs_zerocopy"},       {"memory", "uvm", "memory.vs_uvm"},
      {"host-cold", "zerocopy", "host.cold.vs_zerocopy"},
      {"host-cold", "zerocopy-cold", "host.cold.vs_zerocopy.cold"},
      {"host-cold", "uvm", "host.cold.vs_uvm"}};
  std::vector<wb::result> out;
  const double edges = static_cast<double>(h.edges);
  for (const std::string& algo : cfg.algorithms)
    for (const pair_spec& p : pairs) {
      const auto a = t.find(p.method), b = t.find(p.against);
      if (a == t.end() || b == t.end()) continue;
      const auto ma = a->second.find(algo), mb = b->second.find(algo);
      if (ma == a->second.end() || mb == b->second.end()) continue;
      const measurement& x = ma->second;
      const measurement& y = mb->second;
      for (const bool compute_only : {false, true}) {
        const double xs = compute_only ? x.compute_s : x.e2e();
        const double ys = compute_only ? y.compute_s : y.e2e();
        wb::result r;
        r.name = algo + "." + p.name + (compute_only ? ".compute" : "");
        r.value = wb::round_significant(edges / xs / 1e9, 4);
        r.unit = compute_only ? "G edges/s (compute)" : "G edges/s (end to end)";
        r.ceiling = wb::round_significant(edges / ys / 1e9, 4);
        r.ceiling_name = std::string(p.against) + (compute_only ? ", compute only" : ", end to end incl. load");
        r.verified = true;
        r.mismatches = x.mismatches + y.mismatches;
        wb::json::object_builder pb;
        pb.add("graph", cfg.path)
            .add("vertices", static_cast<unsigned long long>(h.vertices))
            .add("edges", static_cast<unsigned long long>(h.edges))
            .add("graph_bytes", static_cast<unsigned long long>(h.file_bytes))
            .add("edge_bytes", static_cast<unsigned long long>(h.edge_bytes()))
            .add("value_load_s", wb::round_significant(x.load_s, 4))
            .add("value_compute_s", wb::round_significant(x.compute_s, 4))
            .add("ceiling_load_s", wb::round_significant(y.load_s, 4))
            .add("ceiling_compute_s", wb::round_significant(y.compute_s, 4))
            .add("value_load_includes", load_includes(p.method, cfg))
            .add("ceiling_load_includes", load_includes(p.against, cfg))
            .add("passes", x.passes);
        if (x.has_cache) {
          pb.add("cache_bytes", static_cast<unsigned long long>(
                                    store_options(cfg, h, controller_kind::host).cache_bytes))
              .add("line_size", cfg.store.line_size)
              .add("hit_rate", wb::round_significant(x.cache.hit_rate(), 4))
              .add("bytes_read", static_cast<unsigned long long>(x.cache.bytes_read))
              .add("value_cache_setup_s", wb::round_significant(x.setup_s, 4))
              .add("service_threads", cfg.store.service_threads);
        }
        if (algo == "pagerank") pb.add("iterations", cfg.iterations);
        if (algo == "cc")
          pb.add("cc_edges",
                 cfg.cc_lower_only ? "lower (sorted prefix below v, each edge once)" : "all");
        r.params = pb.done();
        out.push_back(std::move(r));
      }
    }
  return out;
}

void print_table(const table_of& t, const config& cfg) {
  wb::table tab({"method", "algorithm", "load s", "compute s", "end to end s", "passes", "hit rate", "mismatches"});
  for (const std::string& m : cfg.methods) {
    const auto it = t.find(m);
    if (it == t.end()) continue;
    for (const auto& [algo, x] : it->second) {
      char buf[4][32];
      std::snprintf(buf[0], 32, "%.3f", x.load_s);
      std::snprintf(buf[1], 32, "%.3f", x.compute_s);
      std::snprintf(buf[2], 32, "%.3f", x.e2e());
      std::snprintf(buf[3], 32, "%.3f", x.cache.hit_rate());
      tab.add({m, algo, buf[0], buf[1], buf[2], std::to_string(x.passes), x.has_cache ? buf[3] : "-",
               std::to_string(x.mismatches)});
    }
  }
  std::printf("%s", tab.str().c_str());
}

template <class T>
void dump_array(const std::string& path, const std::vector<T>& v) {
  if (v.empty()) return;
  wg::write_raw(path, v.data(), v.size() * sizeof(T), 1);
}

// The references as raw arrays (bfs.u32, cc.u32, pagerank.f64, sssp.f32)
// and the source vertex, so an independent implementation can check them.
void dump_references(const std::string& dir, const references& ref) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw std::runtime_error("creating " + dir + ": " + std::strerror(errno));
  const std::string source = std::to_string(ref.source) + "\n";
  wg::write_raw(dir + "/source.txt", source.data(), source.size(), 1);
  dump_array(dir + "/bfs.u32", ref.bfs);
  dump_array(dir + "/cc.u32", ref.cc);
  dump_array(dir + "/pagerank.f64", ref.pagerank);
  dump_array(dir + "/sssp.f32", ref.sssp);
}

int run(const config& cfg) {
  const wg::csr_header h = wg::read_csr_header(cfg.path);
  std::printf("graph %s: %llu vertices, %llu edges, %s, edge bytes %s\n", cfg.path.c_str(),
              static_cast<unsigned long long>(h.vertices), static_cast<unsigned long long>(h.edges),
              wb::format_size(h.file_bytes).c_str(), wb::format_size(h.edge_bytes()).c_str());
  for (const std::string& a : cfg.algorithms)
    if (a == "sssp" && !h.is_weighted()) throw wb::usage_error("sssp needs a weighted graph: " + cfg.path);

  wb::stopwatch clock;
  const wg::csr g = wg::read_csr(cfg.path, cfg.threads);
  references ref;
  ref.source = pick_source(g);
  for (const std::string& a : cfg.algorithms) {
    wb::stopwatch t;
    if (a == "bfs") ref.bfs = apps::reference::bfs(g, ref.source, cfg.threads);
    if (a == "cc") ref.cc = apps::reference::components(g, cfg.threads);
    if (a == "pagerank") ref.pagerank = apps::reference::pagerank(g, cfg.iterations, 0.85, cfg.threads);
    if (a == "sssp") ref.sssp = apps::reference::sssp(g, ref.source);
    std::printf("CPU reference %-8s %.2f s\n", a.c_str(), t.seconds());
  }
  if (!cfg.dump.empty()) dump_references(cfg.dump, ref);
  std::fflush(stdout);

  table_of t;
  int status = 0;
  const wb::run_info info = wb::run_info::now("apps", runtime::device_name(), cfg.command);
  auto record = [&](const std::string& method, const std::string& algo, const measurement& m) {
    t[method][algo] = m;
    std::printf("%-13s %-8s load %7.3f s (cache setup %.3f s)  compute %7.3f s  passes %3u  mismatches %llu %s\n",
                method.c_str(), algo.c_str(), m.load_s, m.setup_s, m.compute_s, m.passes,
                static_cast<unsigned long long>(m.mismatches), m.first_mismatch.c_str());
    std::fflush(stdout);
    if (m.mismatches) status = 3;
  };

  for (const std::string& method : cfg.methods) {
    try {
      const bool cold = method == "host-cold" || method == "zerocopy-cold";
      const std::vector<std::string>& algos = cold ? cfg.cold_algorithms : cfg.algorithms;
      if (method == "memory" || method == "host" || method == "host-cold") {
        const options o = store_options(cfg, h, method == "memory" ? controller_kind::memory : controller_kind::host);
        // The memory controller reads the whole file once; the host
        // controller only opens it, so it is opened per algorithm.
        std::shared_ptr<controller> shared;
        double shared_load = 0;
        if (method == "memory") {
          wb::stopwatch load;
          shared = make_controller(cfg.path, o);
          shared_load = load.seconds();
          std::printf("memory controller: file loaded in %.3f s (%u loader threads)\n", shared_load,
                      o.service_threads);
        }
        for (const std::string& algo : algos) {
          if (method == "host-cold") wb::drop_page_cache(cfg.path);
          wb::stopwatch load;
          const std::shared_ptr<controller> ctl = shared ? shared : make_controller(cfg.path, o);
          wb::stopwatch setup;
          store_setup s = open_store(o, h, ctl);
          const double setup_s = setup.seconds();
          const double load_s = shared_load + load.seconds();
          measurement m = run_algorithm(algo, s.view(h), ref, cfg);
          s.check();
          ctl->check();
          m.load_s = load_s;
          m.setup_s = setup_s;
          m.cache = s.c->stats();
          m.has_cache = true;
          record(method, algo, m);
        }
      } else {
        if (cold) wb::drop_page_cache(cfg.path);
        loaded_graph lg;
        const double load_s = load_plain(method, cfg, h, lg);
        for (const std::string& algo : algos) {
          measurement m = run_algorithm(algo, lg.view(), ref, cfg);
          m.load_s = load_s;
          record(method, algo, m);
        }
      }
    } catch (const std::exception& e) {
      std::printf("%s: FAILED: %s\n", method.c_str(), e.what());
      std::fflush(stdout);
      status = status ? status : 1;
    }
    const std::vector<wb::result> rs = comparisons(t, cfg, h);
    if (!cfg.json.empty() && !rs.empty()) wb::write_results(cfg.json, info, rs);
  }
  std::printf("\n");
  print_table(t, cfg);
  const std::vector<wb::result> rs = comparisons(t, cfg, h);
  std::printf("\n%s", wb::results_table(rs).c_str());
  std::printf("total %.1f s\n", clock.seconds());
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  wb::arg_parser p("warpstore-graph",
                   "Graph algorithms on a CSR file through warpstore and its baselines, verified");
  p.common()
      .positional("GRAPH", "CSR graph file (warpstore-graphgen)")
      .option("algorithms", "LIST", "bfs,cc,pagerank", "bfs, cc, pagerank, sssp")
      .option("methods", "LIST", "hbm,zerocopy,memory,host,uvm,host-cold",
              "hbm, zerocopy, uvm, memory, host, host-cold, zerocopy-cold, run in the order given")
      .option("cold-algorithms", "LIST", "bfs,cc", "algorithms the cold methods run")
      .option("cache-fraction", "F", "0.25", "warpstore cache as a fraction of the edge bytes")
      .option("iterations", "N", "5", "PageRank iterations")
      .option("cc-edges", "lower|all", "lower",
              "CC reads the prefix of each sorted list below the vertex (each undirected edge "
              "once) or every edge")
      .option("threads", "N", tools::hardware_threads(),
              "CPU threads for loading and the references")
      .option("dump", "DIR", "",
              "write the CPU references there (scripts/graph_check_scipy.py checks them)")
      .option("json", "PATH", std::string(WARPSTORE_SOURCE_DIR) + "/bench/results/apps.json",
              "results file to merge into (\"\" for none)");
  // The library settings it sets, with this study's defaults (the table gives
  // the flags, their syntax and range checks).
  wb::declare_options(p.common(), {{"line_size", "4K", "warpstore cache line size"},
                                   {"service_threads", "12", "host controller service threads"}});
  return tools::cli_main(p, "warpstore-graph", argc, argv, [&](const wb::parsed_args& a) {
    config c;
    c.path = a.positional("GRAPH");
    c.algorithms = a.list("algorithms");
    c.methods = a.list("methods");
    c.cold_algorithms = a.list("cold-algorithms");
    for (const std::string& x : c.cold_algorithms)
      if (std::find(c.algorithms.begin(), c.algorithms.end(), x) == c.algorithms.end())
        throw wb::usage_error("--cold-algorithms: " + x + " is not in --algorithms");
    c.cache_fraction = a.real("cache-fraction");
    if (c.cache_fraction <= 0 || c.cache_fraction > 1)
      throw wb::usage_error("--cache-fraction must be in (0, 1]");
    c.store = wb::apply_options(a);
    c.iterations = static_cast<std::uint32_t>(a.count("iterations"));
    const std::string cc_edges = a.str("cc-edges");
    if (cc_edges != "lower" && cc_edges != "all")
      throw wb::usage_error("--cc-edges: lower or all, not " + cc_edges);
    c.cc_lower_only = cc_edges == "lower";
    c.threads = static_cast<unsigned>(std::max<std::uint64_t>(1, a.count("threads")));
    c.json = a.str("json");
    c.dump = a.str("dump");
    c.command = a.command_line();
    return run(c);
  });
}
