// warpstore-bench block: raw queue I/O with no cache, like fio run by GPU
// threads. Every thread issues --requests-per-thread reads of --request bytes
// through io_ref::read into its own slot of a device buffer; every byte is
// verified against the file pattern after each timed round. The ceiling runs
// in the same process on the same file and trace: raw io_uring with the
// controller's thread count and ring depth (host controller), or the
// pinned-memory copy kernel (memory controller).
#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "bench/block_io.h"
#include "bench/ceilings/kernels.cuh"
#include "bench/ceilings/uring_reader.h"
#include "bench/subcommands.h"
#include "support/gpu.cuh"
#include "support/timing.h"
#include "warpstore/controller.h"
#include "warpstore/settings.h"

namespace warpstore::bench {

namespace {

// One thread per request stream; see block_thread. Launched with whole warps.
__global__ void block_read_kernel(io_ref io, trace tr, std::uint64_t threads, std::uint64_t r0,
                                  std::uint32_t rounds, std::uint32_t request_bytes,
                                  std::byte* dst, error_record* errors) {
  const std::uint64_t tid = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  block_thread(io, tr, 0xFFFFFFFFu, threads, tid, r0, rounds, request_bytes, dst, errors);
}

}  // namespace

void declare_block(command_spec& cmd) {
  declare_file_options(cmd);
  declare_trace_options(cmd);
  declare_controller_options(cmd);
  cmd.option("threads", "N", "128K", "GPU threads in all (1K .. 1M); each issues its own reads")
      .option("block-threads", "N", "256", "threads per thread block (multiple of 32)")
      .option("request", "BYTES", "4K", "bytes per read: a multiple of 512, 512 to 64K")
      .option("requests-per-thread", "N", "8", "timed reads per thread")
      .option("warmup", "N", "1", "untimed (but verified) reads per thread before the timed ones")
      .option("dst-bytes", "BYTES", "4GiB", "device destination buffer; more requests go in rounds")
      .option("name", "NAME", "", "result name [default: block.<controller>.<pattern><request>]")
      .flag("no-ceiling", "skip the ceiling measurement");
}

void run_block(const parsed_args& args, report& out) {
  // ---- options ----
  options opts = controller_options(args);

  const std::uint64_t request = checked_request(args);
  opts.line_size = static_cast<std::uint32_t>(request);  // staging slots hold one request
  const std::uint64_t threads = args.count("threads");
  if (threads == 0) throw usage_error("--threads must be at least 1");
  const std::uint64_t block_threads = checked_block_threads(args);
  const std::uint64_t per_thread = args.count("requests-per-thread");
  if (per_thread == 0) throw usage_error("--requests-per-thread must be at least 1");
  const std::uint64_t warmup = args.count("warmup");
  const std::uint64_t dst_bytes = args.size("dst-bytes");
  if (threads * request > dst_bytes)
    throw usage_error("--threads x --request (" + format_size(threads * request) +
                      ") exceeds --dst-bytes (" + format_size(dst_bytes) + ")");
  validate_usage(opts);
  const bool host = opts.controller == controller_kind::host;

  // ---- file, trace, controller ----
  const bench_file file = prepare_file(args, host && opts.direct != direct_io::on);
  const std::uint64_t requests = threads * per_thread;
  const bench_trace tr(args, file.bytes / request, requests);

  std::shared_ptr<controller> ctrl = make_controller(file.path, opts);
  const io_ref io = ctrl->device_ref();
  const bool direct_used = host && ctrl->file().direct();

  const std::uint64_t per_round = std::min<std::uint64_t>(per_thread, dst_bytes / (threads * request));
  auto dst = runtime::make_device<std::byte>(threads * per_round * request, false);
  auto errors = runtime::make_device<error_record>(1);
  const auto grid = static_cast<unsigned>((threads + block_threads - 1) / block_threads);

  // One launch of `rounds` requests per thread from request r0 on, verified
  // afterwards; returns the kernel's seconds.
  std::uint64_t mismatches = 0;
  gpu_timer timer;
  auto launch = [&](std::uint64_t r0, std::uint64_t rounds, const char* what) {
    runtime::memset_device(dst.get(), 0xFF, threads * rounds * request);  // no stale slot passes
    runtime::memset_device(errors.get(), 0, sizeof(error_record));
    timer.start();
    block_read_kernel<<<grid, static_cast<unsigned>(block_threads)>>>(
        io, tr.device(), threads, r0, static_cast<std::uint32_t>(rounds),
        static_cast<std::uint32_t>(request), dst.get(), errors.get());
    timer.stop();
    check_launch(what);
    const double secs = timer.seconds();
    ctrl->check();
    error_record e{};
    runtime::copy_to_host(&e, errors.get(), sizeof e);
    if (e.count != 0) throw io_error(e, std::string(what) + " (element = request number)");
    mismatches += verify_trace(dst.get(), static_cast<std::uint32_t>(request), tr.device(),
                               r0 * threads, rounds * threads, file.seed);
    return secs;
  };

  if (warmup > 0) launch(0, std::min(warmup, per_round), "block_read_kernel (warm-up)");
  double seconds = 0;
  unsigned rounds = 0;
  for (std::uint64_t r0 = 0; r0 < per_thread; r0 += per_round, ++rounds)
    seconds += launch(r0, std::min(per_round, per_thread - r0), "block_read_kernel");
  const controller_stats stats = ctrl->stats();
  const std::uint64_t bytes = requests * request;
  const double gbps = gb_per_s(static_cast<double>(bytes), seconds);
  const double iops = per_s(static_cast<double>(requests), seconds);

  // ---- params ----
  json::object params = json::object_builder()
                            .add("threads", threads)
                            .add("block_threads", block_threads)
                            .add("request", request)
                            .add("requests", requests)
                            .add("requests_per_thread", per_thread)
                            .done();
  tr.add_params(params);
  add_controller_params(params, opts, *ctrl);
  if (host) params.push_back({"doorbells", static_cast<unsigned long long>(stats.doorbells)});
  params.push_back({"commands", static_cast<unsigned long long>(stats.commands)});
  params.push_back({"rounds", rounds});
  params.push_back({"seconds", seconds});
  params.push_back({"file_bytes", file.bytes});

  // ---- ceiling, same process, same file, same trace ----
  std::optional<double> ceiling_gbps, ceiling_iops;
  std::string ceiling_name;
  if (!args.flag("no-ceiling")) {
    ceiling_figure f;
    if (host) {
      ctrl.reset();  // its service threads would compete for the cores
      f = uring_ceiling(file, opts, direct_used, tr, requests, static_cast<std::uint32_t>(request));
    } else {
      f = pinned_ceiling(file, io.memory, tr, requests, static_cast<std::uint32_t>(request), dst_bytes);
    }
    ceiling_gbps = f.gbps;
    ceiling_iops = f.per_s;
    ceiling_name = f.name;
    for (auto& kv : f.params) params.push_back(std::move(kv));
  }

  const std::string name = args.str("name").empty()
                               ? "block." + std::string(to_string(opts.controller)) + "." +
                                     tr.pattern() + size_tag(request)
                               : args.str("name");
  result r{name, gbps, "GB/s", ceiling_gbps, ceiling_name, true, mismatches, params};
  out.results.push_back(r);
  r.name = name + ".iops";
  r.value = iops;
  r.unit = "IOPS";
  r.ceiling = ceiling_iops;
  out.results.push_back(std::move(r));

  std::ostringstream note;
  note << "block: " << requests << " reads of " << format_size(request) << " by " << threads
       << " GPU threads in " << rounds << " round(s), " << seconds << " s; controller "
       << to_string(opts.controller);
  if (host)
    note << " (" << io.queues.count << " queue pairs x " << opts.queue_depth << ", "
         << opts.service_threads << " service threads, " << (direct_used ? "O_DIRECT" : "buffered")
         << ", delivery " << to_string(opts.deliver) << ", " << stats.doorbells << " doorbells)";
  out.notes.push_back(note.str());
}

}  // namespace warpstore::bench
