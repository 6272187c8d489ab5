// Options and setup shared by the subcommands of warpstore-bench.
#include <cstdio>

#include "bench/common/files.h"
#include "bench/common/zipf.h"
#include "bench/subcommands.h"

namespace warpstore::bench {

void declare_file_options(command_spec& cmd) {
  cmd.option("file", "PATH", "/tmp/warpstore-bench.dat",
             "data file; generated (pattern file) if missing")
      .option("file-size", "BYTES", "16GiB",
              "size of the file to generate; if given, an existing file must have it")
      .option("file-seed", "N", "0", "pattern seed of the file")
      .flag("no-warm", "do not read the file into the page cache before buffered measurements");
}

bench_file prepare_file(const parsed_args& args, bool warm) {
  bench_file f;
  f.path = args.str("file");
  f.seed = static_cast<std::uint64_t>(args.integer("file-seed"));
  f.bytes = ensure_pattern_file(f.path, args.size("file-size"), f.seed, args.given("file-size"));
  if (warm && !args.flag("no-warm")) {
    const double secs = warm_page_cache(f.path);
    std::fprintf(stderr, "page cache: read %s in %.1f s\n", f.path.c_str(), secs);
  }
  return f;
}

void declare_trace_options(command_spec& cmd, const char* default_pattern) {
  cmd.option("pattern", "P", default_pattern, "access pattern: random | sequential | zipf")
      .option("zipf-exponent", "S", "0.99", "zipf exponent (with --pattern zipf)")
      .option("seed", "N", "1", "seed of the random trace (the same for warpstore and its ceiling)");
}

bench_trace::bench_trace(const parsed_args& args, std::uint64_t blocks, std::uint64_t requests) {
  if (blocks == 0) throw usage_error("the file holds no whole block of the request size");
  const std::string& pattern = args.choice("pattern", {"random", "sequential", "zipf"});
  const auto seed = static_cast<std::uint64_t>(args.integer("seed"));
  if (pattern == "random") {
    host_ = device_ = trace::uniform(seed, blocks);
  } else if (pattern == "sequential") {
    host_ = device_ = trace::sequential(blocks);
  } else {
    exponent_ = args.real("zipf-exponent");
    if (!(exponent_ > 0)) throw usage_error("--zipf-exponent must be positive");
    host_indices_ = zipf_generator(blocks, exponent_, seed).indices(requests);
    device_indices_ = runtime::make_device<std::uint64_t>(requests, false);
    runtime::copy_to_device(device_indices_.get(), host_indices_.data(),
                            requests * sizeof(std::uint64_t));
    host_ = trace::indexed(host_indices_.data(), blocks);
    host_.seed = seed;
    device_ = host_.with_indices(device_indices_.get());
  }
}

void bench_trace::add_params(json::object& params) const {
  params.push_back({"pattern", pattern()});
  if (host_.kind != access::sequential) params.push_back({"seed", host_.seed});
  if (host_.kind == access::indexed) params.push_back({"zipf_exponent", exponent_});
}

std::string size_tag(std::uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "m";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "k";
  return std::to_string(bytes);
}

void* pinned_alloc(std::size_t bytes) { return runtime::alloc_host_mapped(bytes); }
void pinned_free(void* p) { runtime::free_host_mapped(p); }

}  // namespace warpstore::bench
