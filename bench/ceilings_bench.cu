// warpstore-bench ceilings: only the ceilings, each verified.
//   uring   raw io_uring reads of the trace, for each --cpu-threads count
//   pinned  the pinned-memory copy kernel over the same trace
//   hbm     plain GPU-memory read bandwidth
#include <algorithm>
#include <cstdio>
#include <set>

#include "bench/ceilings/kernels.cuh"
#include "bench/ceilings/uring_reader.h"
#include "bench/subcommands.h"
#include "support/gpu.cuh"
#include "warpstore/controller.h"
#include "warpstore/settings.h"

namespace warpstore::bench {

void declare_ceilings(command_spec& cmd) {
  declare_file_options(cmd);
  declare_trace_options(cmd);
  cmd.option("only", "LIST", "uring,pinned,hbm", "which ceilings: uring, pinned, hbm")
      .option("request", "BYTES", "4K", "bytes per read or copied line (multiple of 512)")
      .option("requests", "N", "1M", "reads (lines) in all")
      .option("cpu-threads", "LIST", "1,4,8", "io_uring thread counts to measure")
      .option("depth", "N", "64", "io_uring queue depth per thread")
      .option("direct", "off|auto|on", "off", "O_DIRECT for the io_uring reads")
      .option("hbm-bytes", "BYTES", "8GiB", "GPU memory to read (capped at 80 % of free)")
      .option("repeats", "N", "5", "timed repeats of the GPU-memory read (best is reported)")
      .option("dst-bytes", "BYTES", "4GiB", "device buffer of the copy kernel; beyond it, rounds");
}

void run_ceilings(const parsed_args& args, report& out) {
  const std::vector<std::string> only = args.list("only");
  const std::set<std::string> parts(only.begin(), only.end());
  for (const auto& p : parts)
    if (p != "uring" && p != "pinned" && p != "hbm")
      throw usage_error("--only: '" + p + "' is not one of uring, pinned, hbm");
  const std::uint64_t request = args.size("request");
  if (request == 0 || request % 512 != 0) throw usage_error("--request must be a multiple of 512");
  const std::uint64_t requests = args.count("requests");
  const direct_mode direct = parse_direct_mode(args.str("direct"));
  std::vector<unsigned> cpu_threads;
  for (const auto& t : args.list("cpu-threads")) {
    const std::uint64_t n = parse_size(t);
    if (n == 0 || n > 1024) throw usage_error("--cpu-threads: '" + t + "' is not 1 to 1024");
    cpu_threads.push_back(static_cast<unsigned>(n));
  }
  const std::uint64_t depth = args.count("depth");
  if (depth == 0 || depth > 32768) throw usage_error("--depth must be 1 to 32768");

  const bool uring = parts.count("uring") != 0, pinned = parts.count("pinned") != 0;
  bench_file file;
  std::optional<bench_trace> tr;
  if (uring || pinned) {
    file = prepare_file(args, uring && direct != direct_mode::on);
    tr.emplace(args, file.bytes / request, requests);
  }
  const std::string tag = uring || pinned ? std::string(tr->pattern()) + size_tag(request) : "";

  auto entry = [&](std::string name, double value, const char* unit, std::uint64_t mismatches,
                   json::object params) {
    result r;
    r.name = std::move(name);
    r.value = value;
    r.unit = unit;
    r.verified = true;
    r.mismatches = mismatches;
    r.params = std::move(params);
    out.results.push_back(std::move(r));
  };

  if (uring) {
    for (const unsigned t : cpu_threads) {
      uring_reader_config c;
      c.path = file.path;
      c.threads = t;
      c.queue_depth = static_cast<unsigned>(depth);
      c.block_bytes = static_cast<std::uint32_t>(request);
      c.requests = requests;
      c.trace = tr->host();
      c.direct = direct;
      c.file_seed = file.seed;
      c.alloc = pinned_alloc;
      c.release = pinned_free;
      const uring_reader_result u = run_uring_reader(c);
      if (u.errors != 0)
        throw runtime_error("io_uring ceiling: " + std::to_string(u.errors) +
                            " reads failed; first: " + u.first_error);
      json::object params = json::object_builder()
                                .add("threads", t)
                                .add("depth", depth)
                                .add("request", request)
                                .add("requests", requests)
                                .add("direct", u.direct)
                                .add("fixed_buffers", u.fixed_buffers)
                                .add("rounds", u.rounds)
                                .add("seconds", u.seconds)
                                .add("file_bytes", file.bytes)
                                .done();
      tr->add_params(params);
      const std::string name = "ceiling.uring." + tag + ".t" + std::to_string(t);
      entry(name, u.gbps, "GB/s", u.mismatches, params);
      entry(name + ".iops", u.iops, "IOPS", u.mismatches, params);
    }
  }

  if (pinned) {
    // The memory controller holds the file in pinned memory: the copy kernel reads that.
    options opts = options::from_environment();
    opts.controller = controller_kind::memory;
    const std::shared_ptr<controller> memory = make_controller(file.path, opts);
    const io_ref io = memory->device_ref();
    copy_config c;
    c.source = io.memory.data;
    c.source_bytes = io.memory.capacity_blocks << nvme::block_shift;
    c.tr = tr->device();
    c.lines = requests;
    c.line_bytes = static_cast<std::uint32_t>(request);
    c.file_seed = file.seed;
    c.dst_bytes = args.size("dst-bytes");
    const copy_result p = pinned_random_copy(c);
    json::object params = json::object_builder()
                              .add("line_size", request)
                              .add("lines", requests)
                              .add("lines_per_warp", p.lines_per_warp)
                              .add("rounds", p.rounds)
                              .add("seconds", p.seconds)
                              .add("file_bytes", file.bytes)
                              .done();
    tr->add_params(params);
    const std::string name = "ceiling.pinned_copy." + tag;
    entry(name, p.gbps, "GB/s", p.mismatches, params);
    entry(name + ".iops", p.lines_per_s, "IOPS", p.mismatches, params);
  }

  if (parts.count("hbm")) {
    const hbm_result h = hbm_read(args.size("hbm-bytes"), static_cast<int>(args.count("repeats")),
                                  static_cast<std::uint64_t>(args.integer("file-seed")));
    auto params = [&](int load_bytes) {
      return json::object_builder()
          .add("bytes", h.bytes)
          .add("load_bytes", load_bytes)
          .add("repeats", h.repeats)
          .add("statistic", "best")
          .done();
    };
    entry("ceiling.hbm_read.4b", h.gbps_4b, "GB/s", h.mismatches, params(4));
    entry("ceiling.hbm_read.16b", h.gbps_16b, "GB/s", h.mismatches, params(16));
  }
}

}  // namespace warpstore::bench
