// Options and setup shared by the subcommands of warpstore-bench.
#include <cstdio>

#include "bench/ceilings/kernels.cuh"
#include "bench/ceilings/uring_reader.h"
#include "bench/subcommands.h"
#include "support/setting_options.h"
#include "support/files.h"
#include "support/zipf.h"

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

void declare_controller_options(command_spec& cmd) {
  declare_options(cmd, {{"controller", "", "what serves the queues"},
                        {"queue_pairs"},
                        {"queue_depth"},
                        {"service_threads", "", "host controller CPU threads; the io_uring ceiling uses as many"},
                        {"uring_depth", "", "io_uring entries per service thread; the ceiling's queue depth"},
                        {"direct", "", "O_DIRECT for the host controller"},
                        {"deliver", "", "host controller delivery: GPU pulls staging, or copy engine pushes"}});
}

// A bench measures one named controller: `auto` (the library's default,
// which picks by the file's residency at open) measures the host controller
// here; --controller memory measures the other.
options controller_options(const parsed_args& args) {
  options o = apply_options(args);
  if (o.controller == controller_kind::automatic) o.controller = controller_kind::host;
  return o;
}

void validate_usage(const options& opts) {
  try {
    opts.validate();
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
}

std::uint64_t checked_request(const parsed_args& args) {
  const std::uint64_t request = args.size("request");
  if (request < 512 || request > 65536 || request % 512 != 0)
    throw usage_error("--request must be a multiple of 512 from 512 to 64K");
  return request;
}

std::uint64_t checked_block_threads(const parsed_args& args) {
  const std::uint64_t n = args.count("block-threads");
  if (n < 32 || n > 1024 || n % 32 != 0)
    throw usage_error("--block-threads must be a multiple of 32 from 32 to 1024");
  return n;
}

void add_controller_params(json::object& params, const options& opts, const controller& ctrl) {
  params.push_back({"controller", ctrl.name()});
  if (std::string(ctrl.name()) != "host") return;
  params.push_back({"queues", static_cast<unsigned long long>(ctrl.device_ref().queues.count)});
  params.push_back({"depth", opts.queue_depth});
  params.push_back({"service_threads", opts.service_threads});
  params.push_back({"uring_depth", opts.uring_depth});
  params.push_back({"direct", ctrl.file().direct()});
  params.push_back({"delivery", to_string(opts.deliver)});
}

namespace {

// The rates of a ceiling that read `mismatches` wrong words; raises unless
// none.
ceiling_figure verified_ceiling(const char* what, std::uint64_t mismatches, double gbps,
                                double per_s) {
  if (mismatches != 0)
    throw runtime_error(std::string(what) + " ceiling read wrong data: " +
                        std::to_string(mismatches) + " words differ from the pattern");
  ceiling_figure f;
  f.gbps = gbps;
  f.per_s = per_s;
  return f;
}

}  // namespace

ceiling_figure uring_ceiling(const bench_file& file, const options& opts, bool direct,
                             const bench_trace& tr, std::uint64_t requests, std::uint32_t bytes) {
  uring_reader_config c;
  c.path = file.path;
  c.threads = opts.service_threads;
  c.queue_depth = opts.uring_depth;
  c.block_bytes = bytes;
  c.requests = requests;
  c.trace = tr.host();
  c.direct = direct ? direct_mode::on : direct_mode::off;
  c.file_seed = file.seed;
  c.alloc = pinned_alloc;
  c.release = pinned_free;
  const uring_reader_result u = run_uring_reader(c);
  if (u.errors != 0)
    throw runtime_error("io_uring ceiling: " + std::to_string(u.errors) + " reads failed; first: " +
                        u.first_error);
  ceiling_figure f = verified_ceiling("io_uring", u.mismatches, u.gbps, u.iops);
  f.name = "io_uring " + std::string(tr.pattern()) + " " + format_size(bytes) + " reads, " +
           std::to_string(c.threads) + " threads, QD " + std::to_string(c.queue_depth) +
           (u.direct ? ", O_DIRECT" : ", buffered") + (u.fixed_buffers ? ", fixed buffers" : "") +
           ", same trace";
  f.params.push_back({"ceiling_fixed_buffers", u.fixed_buffers});
  f.params.push_back({"ceiling_mismatches", static_cast<unsigned long long>(u.mismatches)});
  return f;
}

ceiling_figure pinned_ceiling(const bench_file& file, const memory_source_ref& source,
                              const bench_trace& tr, std::uint64_t requests, std::uint32_t bytes,
                              std::uint64_t dst_bytes) {
  copy_config c;
  c.source = source.data;
  c.source_bytes = source.capacity_blocks << nvme::block_shift;
  c.tr = tr.device();
  c.lines = requests;
  c.line_bytes = bytes;
  c.file_seed = file.seed;
  c.dst_bytes = dst_bytes;
  const copy_result p = pinned_random_copy(c);
  ceiling_figure f = verified_ceiling("pinned copy", p.mismatches, p.gbps, p.lines_per_s);
  f.name = "pinned-memory " + std::string(tr.pattern()) + " " + format_size(bytes) +
           " line copy kernel, same trace";
  f.params.push_back({"ceiling_mismatches", static_cast<unsigned long long>(p.mismatches)});
  return f;
}

}  // namespace warpstore::bench
