// warpstore-bench nvme: GPU threads driving an NVMe device, the software
// model (controller nvme-model), measured three ways:
//
//  - reads: random --request reads by --threads GPU threads through the
//    nvme controller's queues (no cache: io_ref::read into a slot each),
//    against the model's own capacity in the same run: a second model over
//    the same file, with the same queues and depth, fed by one CPU thread
//    that keeps every queue full and rings each doorbell once per batch
//    (the CPU-side driver). Both verify every byte. With the file in the
//    page cache (`.cold`: nothing cached on the GPU; the best of --repeat
//    alternating runs each side, every run in params) and, with
//    --disk-requests, after dropping the file's pages (`.cold.disk`, run
//    last, one run each side).
//  - doorbells: --doorbell-threads GPU threads (1 M) one read each: SQ tail
//    doorbell writes per command, and CQ head writes per command.
//  - faults: each misbehaviour the model offers, injected into a fresh
//    controller under 64 K reading threads; survived when the kernel returns
//    within a bound (no hang), every read that reported success holds the
//    file's bytes, and the failure shows up where it was injected.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "bench/ceilings/kernels.cuh"
#include "bench/subcommands.h"
#include "controller/nvme_controller.h"
#include "controller/nvme_driver.h"
#include "controller/nvme_model.h"
#include "support/files.h"
#include "support/gpu.cuh"
#include "support/pattern_file.h"
#include "support/raw_queue.h"
#include "support/timing.h"
#include "warpstore/controller.h"
#include "warpstore/settings.h"

namespace warpstore::bench {

namespace {

// Thread tid reads request r0 + tid of the trace into slot tid of dst and
// leaves its status in status[tid]. Launched with whole warps.
__global__ void nvme_read_kernel(io_ref io, trace tr, std::uint64_t threads, std::uint64_t r0,
                                 std::uint32_t request_bytes, std::byte* dst,
                                 std::uint16_t* status) {
  const std::uint64_t tid = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool live = tid < threads;
  const std::uint32_t blocks = request_bytes >> nvme::block_shift;
  io_request req{};
  if (live) {
    req.slba = tr.index(r0 + tid) * blocks;
    req.blocks = blocks;
    req.dst = dst + tid * request_bytes;
  }
  const nvme::status st = io.read(0xFFFFFFFFu, live, req);
  if (live) status[tid] = st.raw;
}

struct gpu_run {
  double seconds = 0;
  std::uint64_t failed = 0;      // reads that reported an error
  std::uint64_t mismatches = 0;  // wrong words among the reads that succeeded
  std::vector<std::uint16_t> status;
};

// `count` reads through `io`, requests r0.. of the trace, one per thread.
gpu_run gpu_reads(const io_ref& io, const trace& tr, std::uint64_t r0, std::uint64_t count,
                  std::uint32_t request, std::uint64_t seed, bool verify_each) {
  auto dst = runtime::make_device<std::byte>(count * request, false);
  auto status = runtime::make_device<std::uint16_t>(count, false);
  runtime::memset_device(dst.get(), 0xFF, count * request);  // no stale slot passes
  runtime::memset_device(status.get(), 0xFF, count * sizeof(std::uint16_t));
  constexpr unsigned block_threads = 256;
  const auto grid = static_cast<unsigned>((count + block_threads - 1) / block_threads);
  gpu_timer timer;
  timer.start();
  nvme_read_kernel<<<grid, block_threads>>>(io, tr, count, r0, request, dst.get(), status.get());
  timer.stop();
  check_launch("nvme_read_kernel");
  gpu_run g;
  g.seconds = timer.seconds();
  g.status.resize(count);
  runtime::copy_to_host(g.status.data(), status.get(), count * sizeof(std::uint16_t));
  for (std::uint16_t s : g.status) g.failed += nvme::status{s}.success() ? 0 : 1;
  if (!verify_each) {
    g.mismatches = verify_trace(dst.get(), request, tr, r0, count, seed);
    return g;
  }
  // Only the reads that succeeded must hold the file's bytes.
  std::vector<std::byte> host(count * request);
  runtime::copy_to_host(host.data(), dst.get(), host.size());
  for (std::uint64_t i = 0; i < count; ++i)
    if (nvme::status{g.status[i]}.success())
      g.mismatches += tools::count_mismatches(host.data() + i * request,
                                              tr.index(r0 + i) * request, request, seed);
  return g;
}

// The model's capacity: a model of the same configuration over the same
// file, its queues kept full by one CPU thread. Raises on an error status.
struct cpu_run {
  double seconds = 0;
  std::uint64_t mismatches = 0;
  std::uint64_t doorbells = 0;
};
cpu_run cpu_driver_reads(const std::string& path, std::uint32_t queues, std::uint32_t depth,
                         const trace& tr, std::uint64_t r0, std::uint64_t count,
                         std::uint32_t request, std::uint64_t seed) {
  nvme_model::config cfg;
  cfg.path = path;
  cfg.read_only = true;
  cfg.max_queue_entries = std::max<std::uint32_t>(1024, depth);
  cfg.max_io_queues = static_cast<std::uint16_t>(queues);
  nvme_model::device dev(cfg);
  host_dma_memory mem;
  nvme_driver_options o;
  o.name = "cpu-side driver";
  o.io_queues = static_cast<std::uint16_t>(queues);
  o.io_queue_entries = depth;
  nvme_driver drv({dev.bar(), dev.bar_bytes()}, mem, o);
  const auto& pairs = drv.queue_pairs();
  const std::uint32_t blocks = request >> nvme::block_shift;

  // The rings and doorbells of a pair, as the raw queue helper takes them.
  auto view_of = [](const nvme_queue_pair& p) {
    queue_pair_ref v{};
    v.sq = p.sq;
    v.cq = p.cq;
    v.sq_tail_doorbell = p.sq_tail_doorbell;
    v.cq_head_doorbell = p.cq_head_doorbell;
    v.depth = p.entries;
    return v;
  };
  struct queue {
    queue(const nvme_queue_pair& pair, const queue_pair_ref& view) : p(pair), raw(view) {}
    nvme_queue_pair p;
    test::raw_queue raw;
    std::byte* buf = nullptr;
    std::vector<std::uint64_t> request_of;  // by cid
    std::vector<std::uint16_t> free_cids;
    std::uint32_t tail = 0, head = 0, inflight = 0;
    bool phase = true;
  };
  std::vector<queue> qs;
  std::vector<void*> bufs;
  for (const nvme_queue_pair& p : pairs) {
    qs.emplace_back(p, view_of(p));
    queue& q = qs.back();
    q.buf = static_cast<std::byte*>(mem.alloc(std::size_t{q.p.entries} * request, 4096));
    bufs.push_back(q.buf);
    q.request_of.assign(q.p.entries, 0);
    for (std::uint32_t c = 0; c < q.p.entries; ++c)
      q.free_cids.push_back(static_cast<std::uint16_t>(q.p.entries - 1 - c));
  }
  cpu_run run;
  std::uint64_t next = 0, done = 0;
  const auto start = std::chrono::steady_clock::now();
  while (done < count) {
    for (queue& q : qs) {
      // Reap: every CQE whose phase tag is the current one.
      std::uint32_t reaped = 0;
      for (;;) {
        const std::uint32_t dw3 = q.raw.dw3(q.head);
        if (nvme::dw3_phase(dw3) != q.phase) break;
        const std::uint16_t cid = nvme::dw3_cid(dw3);
        const nvme::status st = nvme::dw3_status(dw3);
        if (!st.success())
          throw runtime_error("nvme bench: the CPU-side driver's READ failed: " +
                              describe(st));
        run.mismatches += tools::count_mismatches(q.buf + std::size_t{cid} * request,
                                                  tr.index(q.request_of[cid]) * request, request,
                                                  seed);
        q.free_cids.push_back(cid);
        --q.inflight;
        ++done;
        ++reaped;
        if (++q.head == q.p.entries) {
          q.head = 0;
          q.phase = !q.phase;
        }
      }
      if (reaped) q.raw.retire(reaped);  // rings the CQ head doorbell at q.head
      // Submit as many as fit (at most entries - 1 outstanding), one doorbell.
      std::uint32_t posted = 0;
      while (q.inflight + 1 < q.p.entries && next < count) {
        const std::uint16_t cid = q.free_cids.back();
        q.free_cids.pop_back();
        q.request_of[cid] = r0 + next;
        q.raw.write_entry(q.tail, nvme::make_rw(nvme::opcode::read, cid, drv.options().nsid,
                                                tr.index(r0 + next) * blocks, blocks,
                                                mem.iova(q.buf + std::size_t{cid} * request)));
        q.tail = (q.tail + 1) % q.p.entries;
        ++q.inflight;
        ++next;
        ++posted;
      }
      if (posted) {
        q.raw.ring_sq_value(q.tail);
        ++run.doorbells;
      }
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::minutes(5))
      throw runtime_error("nvme bench: the CPU-side driver made no end in 5 minutes (" +
                          std::to_string(done) + " of " + std::to_string(count) + " done)");
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  drv.shutdown();
  for (void* b : bufs) mem.free(b);
  return run;
}

nvme_controller& nvme_of(controller& c) {
  auto* n = dynamic_cast<nvme_controller*>(&c);
  if (n == nullptr) throw runtime_error("nvme bench: the controller is not nvme-model");
  return *n;
}

}  // namespace

void declare_nvme(command_spec& cmd) {
  declare_file_options(cmd);
  declare_trace_options(cmd);
  declare_controller_options(cmd);
  cmd.option("threads", "N", "256K", "GPU threads of the read runs, one read each")
      .option("request", "BYTES", "4K", "bytes per read: a multiple of 512, 512 to 64K")
      .option("repeat", "N", "3", "read runs of each side, alternating; the best of each is kept")
      .option("disk-requests", "N", "0", "reads of each side after dropping the file's pages (0: skip)")
      .option("doorbell-threads", "N", "1M", "GPU threads of the doorbell run (0: skip)")
      .option("fault-threads", "N", "64K", "GPU threads of each fault run (0: skip the faults)")
      .option("fault-timeout", "SECONDS", "2", "command deadline in the fault runs");
}

void run_nvme(const parsed_args& args, report& out) {
  options opts = controller_options(args);
  opts.controller = controller_kind::nvme_model;
  const std::uint64_t request = checked_request(args);
  opts.line_size = static_cast<std::uint32_t>(request);
  validate_usage(opts);
  const std::uint64_t threads = args.count("threads");
  const std::uint64_t repeat = std::max<std::uint64_t>(1, args.count("repeat"));
  const std::uint64_t disk_requests = args.count("disk-requests");
  const std::uint64_t doorbell_threads = args.count("doorbell-threads");
  const std::uint64_t fault_threads = args.count("fault-threads");
  const bench_file file = prepare_file(args, true);
  const std::uint64_t total = std::max({threads * repeat, disk_requests * 2, doorbell_threads,
                                        fault_threads});
  const bench_trace tr(args, file.bytes / request, total);
  const auto req = static_cast<std::uint32_t>(request);
  const std::string tag = std::string(tr.pattern()) + size_tag(request);

  // ---- reads: GPU-driven against the CPU-side driver, same model ----
  auto read_rows = [&](const std::string& name, std::uint64_t count, bool disk) {
    double gpu_best = 1e30, cpu_best = 1e30;
    std::uint64_t mismatches = 0, queues = 0, gpu_doorbells = 0, gpu_commands = 0,
                  cpu_doorbells = 0;
    json::array gpu_runs, cpu_runs;  // seconds of every run, in order
    const std::uint64_t runs = disk ? 1 : repeat;
    for (std::uint64_t r = 0; r < runs; ++r) {
      const std::uint64_t r0 = r * count;  // fresh requests each run
      {
        std::shared_ptr<controller> ctrl = make_controller(file.path, opts);
        queues = ctrl->device_ref().queues.count;
        if (disk) drop_page_cache(file.path);
        const gpu_run g = gpu_reads(ctrl->device_ref(), tr.device(), r0, count, req, file.seed, false);
        ctrl->check();
        if (g.failed != 0)
          throw runtime_error("nvme bench: " + std::to_string(g.failed) + " GPU reads failed");
        mismatches += g.mismatches;
        gpu_runs.push_back(g.seconds);
        if (g.seconds < gpu_best) {
          gpu_best = g.seconds;
          const controller_stats s = ctrl->stats();
          gpu_doorbells = s.doorbells;
          gpu_commands = s.commands;
        }
      }
      if (disk) drop_page_cache(file.path);
      const cpu_run c = cpu_driver_reads(file.path, static_cast<std::uint32_t>(queues),
                                         opts.queue_depth, tr.host(), r0, count, req, file.seed);
      mismatches += c.mismatches;
      cpu_runs.push_back(c.seconds);
      if (c.seconds < cpu_best) {
        cpu_best = c.seconds;
        cpu_doorbells = c.doorbells;
      }
    }
    const double gpu_iops = per_s(static_cast<double>(count), gpu_best);
    const double cpu_iops = per_s(static_cast<double>(count), cpu_best);
    json::object params = json::object_builder()
                              .add("requests", count)
                              .add("request", request)
                              .add("queues", queues)
                              .add("depth", opts.queue_depth)
                              .add("runs", runs)
                              .add("page_cache", disk ? "dropped before each side" : "warm")
                              .add("gpu_seconds", gpu_best)
                              .add("cpu_seconds", cpu_best)
                              .add("gpu_seconds_each_run", gpu_runs)
                              .add("cpu_seconds_each_run", cpu_runs)
                              .add("gpu_gb_per_s", gb_per_s(static_cast<double>(count * request), gpu_best))
                              .add("gpu_doorbells", gpu_doorbells)
                              .add("gpu_commands", gpu_commands)
                              .add("cpu_doorbells", cpu_doorbells)
                              .add("file_bytes", file.bytes)
                              .done();
    tr.add_params(params);
    out.results.push_back({name, gpu_iops, "IOPS", cpu_iops,
                           "the model's capacity: same model, file and requests, one CPU thread "
                           "keeping every queue full",
                           true, mismatches, params});
  };
  read_rows("nvme.model." + tag + ".cold", threads, false);

  // ---- doorbells under many threads ----
  if (doorbell_threads > 0) {
    std::shared_ptr<controller> ctrl = make_controller(file.path, opts);
    nvme_controller& n = nvme_of(*ctrl);
    const gpu_run g = gpu_reads(ctrl->device_ref(), tr.device(), 0, doorbell_threads, req,
                                file.seed, false);
    ctrl->check();
    if (g.failed != 0)
      throw runtime_error("nvme bench: " + std::to_string(g.failed) + " GPU reads failed");
    const auto db = n.queues().doorbells();
    const std::uint64_t commands = ctrl->stats().commands;
    json::object params = json::object_builder()
                              .add("threads", doorbell_threads)
                              .add("commands", commands)
                              .add("sq_tail_doorbells", db.sq_tail)
                              .add("cq_head_doorbells", db.cq_head)
                              .add("cq_head_per_command",
                                   commands ? static_cast<double>(db.cq_head) / commands : 0.0)
                              .add("queues", ctrl->device_ref().queues.count)
                              .add("depth", opts.queue_depth)
                              .add("seconds", g.seconds)
                              .done();
    out.results.push_back({"nvme.model.doorbells_per_command",
                           commands ? static_cast<double>(db.sq_tail) / commands : 0.0,
                           "SQ doorbell writes / command", std::nullopt, "", true, g.mismatches,
                           params});
  }

  // ---- faults ----
  if (fault_threads > 0) {
    options fo = opts;
    fo.timeout_ns = static_cast<std::uint64_t>(args.real("fault-timeout") * 1e9);
    struct kind {
      const char* name;
      nvme_model::faults f;
      // What must be seen: errors (true) or every read right (false).
      bool errors_expected;
      bool fatal;
    };
    std::vector<kind> kinds(6);
    kinds[0] = {"error_status", {}, true, false};
    kinds[0].f.fail_next = 100;
    kinds[1] = {"dropped_completion", {}, true, false};
    kinds[1].f.drop_next = 1;
    kinds[2] = {"late_completions", {}, false, false};
    kinds[2].f.delay = std::chrono::microseconds(2000);
    kinds[3] = {"reordered_completions", {}, false, false};
    kinds[3].f.reorder_window = 8;
    kinds[4] = {"controller_fatal", {}, true, true};
    kinds[4].f.fatal = true;
    kinds[5] = {"namespace_not_ready", {}, true, false};
    kinds[5].f.namespace_not_ready = true;
    std::uint64_t survived = 0, wrong = 0;
    json::object params;
    std::ostringstream why;
    for (kind& k : kinds) {
      std::shared_ptr<controller> ctrl = make_controller(file.path, fo);
      nvme_of(*ctrl).model().inject(k.f);
      const auto start = std::chrono::steady_clock::now();
      const gpu_run g = gpu_reads(ctrl->device_ref(), tr.device(), 0, fault_threads, req,
                                  file.seed, true);
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      bool check_raised = false;
      try {
        ctrl->check();
      } catch (const std::exception&) {
        check_raised = true;
      }
      // Bounded: a few deadlines at most (each pair's wait ends at its own).
      const bool hung = secs > 10.0 * args.real("fault-timeout") + 30.0;
      const bool seen = k.errors_expected ? g.failed > 0 : g.failed == 0;
      const bool ok = !hung && g.mismatches == 0 && seen && (!k.fatal || check_raised);
      survived += ok ? 1 : 0;
      wrong += g.mismatches;
      params.push_back({std::string(k.name) + ".failed_reads", static_cast<unsigned long long>(g.failed)});
      params.push_back({std::string(k.name) + ".wrong_words", static_cast<unsigned long long>(g.mismatches)});
      params.push_back({std::string(k.name) + ".seconds", secs});
      params.push_back({std::string(k.name) + ".survived", ok});
      if (!ok)
        why << k.name << (hung ? " hung" : "") << (g.mismatches ? " wrong bytes" : "")
            << (!seen ? " outcome not seen" : "") << (k.fatal && !check_raised ? " check() silent" : "")
            << "; ";
    }
    params.push_back({"threads", fault_threads});
    params.push_back({"kinds", static_cast<unsigned long long>(kinds.size())});
    params.push_back({"fault_timeout_s", args.real("fault-timeout")});
    out.results.push_back({"nvme.model.faults", static_cast<double>(survived), "kinds survived",
                           std::nullopt, "", true, wrong, params});
    if (!why.str().empty()) out.notes.push_back("nvme faults not survived: " + why.str());
  }
  // Last: it leaves the file's pages dropped.
  if (disk_requests > 0) read_rows("nvme.model." + tag + ".cold.disk", disk_requests, true);
  out.notes.push_back("nvme: GPU threads drive the software NVMe model (controller nvme-model); "
                      "the ceiling is the same model fed by a CPU-side driver");
}

}  // namespace warpstore::bench
