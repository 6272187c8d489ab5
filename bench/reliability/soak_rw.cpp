// The mixed read/write soak's host side: runs the rounds, replays every
// write into the host's model of the file, flushes, and compares the file on
// disk with the model byte for byte after every part.
#include "bench/reliability/soak_rw.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "support/pattern.cuh"
#include "support/setting_options.h"
#include "warpstore/runtime.h"

namespace warpstore::reliability {

namespace {

using bench::json::object_builder;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The host's replay of a round: writers split over CPU threads (their
// elements are disjoint within a round).
void replay_round(const rw_round& r, std::vector<std::uint64_t>& model) {
  const unsigned threads = static_cast<unsigned>(
      std::min<std::uint64_t>(std::max(1u, std::thread::hardware_concurrency()), r.writers));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::uint64_t w = t; w < r.writers; w += threads) rw_replay(r, w, model.data());
    });
  for (auto& t : pool) t.join();
}

// Wrong bytes of the file at `path` against the model (and a size change
// counts every missing or extra byte).
std::uint64_t compare_file(const std::string& path, const std::vector<std::uint64_t>& model,
                           std::uint64_t& compared) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("soak.readwrite: cannot reopen " + path);
  const std::uint64_t bytes = model.size() * 8;
  const std::uint64_t on_disk = static_cast<std::uint64_t>(::lseek(fd, 0, SEEK_END));
  std::vector<unsigned char> buf(4 << 20);
  const auto* want = reinterpret_cast<const unsigned char*>(model.data());
  std::uint64_t wrong = on_disk > bytes ? on_disk - bytes : 0, off = 0;
  while (off < bytes) {
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), bytes - off));
    ssize_t got = ::pread(fd, buf.data(), n, static_cast<off_t>(off));
    if (got <= 0) break;
    // Words first; bytes only where a word differs.
    if (std::memcmp(buf.data(), want + off, static_cast<std::size_t>(got)) != 0)
      for (ssize_t i = 0; i < got; ++i) wrong += buf[i] != want[off + i];
    off += static_cast<std::uint64_t>(got);
  }
  ::close(fd);
  wrong += bytes - off;  // bytes the file no longer has
  compared += bytes;
  return wrong;
}

// Elements where the writers' own model (device memory) differs from the
// host's replay: both must have seen the same writes.
std::uint64_t compare_models(const std::uint64_t* device_model,
                             const std::vector<std::uint64_t>& host) {
  std::vector<std::uint64_t> part(std::min<std::size_t>(host.size(), 8u << 20));
  std::uint64_t differ = 0;
  for (std::size_t at = 0; at < host.size(); at += part.size()) {
    const std::size_t n = std::min(part.size(), host.size() - at);
    runtime::copy_to_host(part.data(), device_model + at, n * 8);
    for (std::size_t i = 0; i < n; ++i) differ += part[i] != host[at + i];
  }
  return differ;
}

// The writers' operation and read-check counters `c`, added to `b` under
// the names a part's entry and the whole result share.
object_builder& add_lane_counts(object_builder& b, const unsigned long long (&c)[rw_counters]) {
  return b.add("stores", c[rw_stores])
      .add("span_writes", c[rw_span_writes])
      .add("reads", c[rw_reads])
      .add("span_reads", c[rw_span_reads])
      .add("read_bytes_checked", c[rw_checked_bytes])
      .add("wrong_read_bytes", c[rw_wrong_bytes]);
}

}  // namespace

std::vector<rw_part> default_rw_parts() {
  return {{controller_kind::host, 4096, 512},
          {controller_kind::memory, 65536, 512},
          {controller_kind::host, 65536, 128 << 10},
          {controller_kind::memory, 4096, 16 << 10}};
}

bench::result run_soak_readwrite(const rw_setup& s, const std::vector<rw_part>& parts,
                                 const rw_launcher& launch) {
  const std::uint64_t elements = s.file_bytes / 8;
  if (s.file_bytes % 8 != 0 || elements == 0)
    throw std::invalid_argument("soak.readwrite: file size must be a positive multiple of 8");
  std::vector<std::uint64_t> model(elements);
  for (std::uint64_t i = 0; i < elements; ++i) model[i] = tools::pattern_word(i * 8);
  auto device_model = runtime::make_device<std::uint64_t>(elements, false);
  runtime::copy_to_device(device_model.get(), model.data(), elements * 8);
  const std::uint32_t span_max = std::max(s.span_max / launch.lanes, 1u) * launch.lanes;
  auto scratch = runtime::make_device<std::uint64_t>(s.writers * span_max);
  auto counters = runtime::make_device<unsigned long long>(rw_counters);
  const std::uint64_t groups = s.writers + std::max<std::uint64_t>(1, s.writers / 4);
  const double bound_s = std::max(120.0, 20.0 * static_cast<double>(s.timeout_ns) * 1e-9);

  unsigned long long total[rw_counters] = {};
  std::uint64_t file_wrong = 0, compared = 0, errors = 0, host_flushes = 0, device_flushes = 0,
                failed_device_flushes = 0, model_disagreements = 0;
  std::string first_error;
  double seconds_all = 0;
  std::uint64_t round = 0;
  bench::json::array runs;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const rw_part& pt = parts[p];
    const std::uint32_t chunk_elems =
        std::max(pt.chunk_bytes / 8 / launch.lanes, 1u) * launch.lanes;
    if (elements / chunk_elems < groups)
      throw std::invalid_argument("soak.readwrite: " + std::to_string(elements / chunk_elems) +
                                  " chunks of " + std::to_string(chunk_elems * 8) +
                                  " bytes, fewer than the " + std::to_string(groups) +
                                  " owner groups: a larger file or fewer writers");
    options o;
    o.controller = pt.kind;
    o.line_size = pt.line_size;
    o.cache_bytes = s.cache_bytes;
    o.ways = s.ways;
    o.service_threads = s.service_threads;
    o.queue_pairs = 0;
    o.direct = direct_io::off;
    o.timeout_ns = s.timeout_ns;
    o.writable = true;
    unsigned long long part_counts[rw_counters] = {};
    std::uint64_t part_errors = 0, part_wrong_file = 0;
    std::string part_error;
    const auto note_error = [&](const std::exception& e) {
      ++part_errors;
      if (part_error.empty()) part_error = e.what();
    };
    const auto t0 = std::chrono::steady_clock::now();
    {
      array<std::uint64_t> a(s.path, 0, o);
      for (std::uint32_t k = 0; k < s.rounds; ++k, ++round) {
        rw_round r{};
        r.a = a.ref();
        r.model = device_model.get();
        r.scratch = scratch.get();
        r.counters = counters.get();
        r.seed = s.seed;
        r.round = round;
        r.writers = s.writers;
        r.groups = groups;
        r.chunks = elements / chunk_elems;
        r.chunk_elems = chunk_elems;
        r.span_max = span_max;
        r.lanes = launch.lanes;
        r.ops = s.ops;
        r.flush_at = round % 3 == 2 ? s.ops / 2 : s.ops;
        launch.round(r, bound_s);
        replay_round(r, model);
        try {
          a.check();
        } catch (const std::exception& e) {
          note_error(e);
        }
        // Between rounds: every fourth a flush from the host, every fourth
        // (another) one from the device; the rest leave dirty lines behind.
        try {
          if (round % 4 == 3) {
            a.flush();
            ++host_flushes;
          } else if (round % 4 == 1) {
            ++device_flushes;
            failed_device_flushes += launch.device_flush(a.ref(), bound_s) ? 0 : 1;
            a.check();
          }
        } catch (const std::exception& e) {
          note_error(e);
        }
      }
      try {
        a.flush();
        ++host_flushes;
      } catch (const std::exception& e) {
        note_error(e);
      }
    }  // closed: what the file holds now is what the next part opens
    const double secs = since(t0);
    runtime::copy_to_host(part_counts, counters.get(), sizeof part_counts);
    runtime::memset_device(counters.get(), 0, sizeof part_counts);
    std::uint64_t part_compared = 0;
    part_wrong_file = compare_file(s.path, model, part_compared);
    compared += part_compared;
    const std::uint64_t disagree = compare_models(device_model.get(), model);
    model_disagreements += disagree;
    for (unsigned i = 0; i < rw_counters; ++i) total[i] += part_counts[i];
    file_wrong += part_wrong_file;
    errors += part_errors;
    failed_device_flushes += part_counts[rw_failed_flushes];
    if (first_error.empty()) first_error = part_error;
    seconds_all += secs;
    std::printf(
        "soak.readwrite %-6s line %6u chunk %6u: %llu stores, %llu span writes, %llu reads, "
        "%llu span reads; %.1f MB checked while running (%llu wrong bytes), file %llu wrong "
        "bytes, %llu failed ops, %llu errors  %.2f s %s\n",
        to_string(pt.kind), pt.line_size, chunk_elems * 8, part_counts[rw_stores],
        part_counts[rw_span_writes], part_counts[rw_reads], part_counts[rw_span_reads],
        part_counts[rw_checked_bytes] * 1e-6, part_counts[rw_wrong_bytes],
        static_cast<unsigned long long>(part_wrong_file), part_counts[rw_failed_ops],
        static_cast<unsigned long long>(part_errors), secs, part_error.c_str());
    std::fflush(stdout);
    object_builder run;
    run.add("controller", to_string(pt.kind))
        .add("line_size", pt.line_size)
        .add("chunk_bytes", chunk_elems * 8);
    runs.push_back(add_lane_counts(run, part_counts)
                       .add("wrong_file_bytes", part_wrong_file)
                       .add("failed_ops", part_counts[rw_failed_ops])
                       .add("errors", part_errors)
                       .add("seconds", bench::round_significant(secs, 3))
                       .add("error", part_error)
                       .done());
  }

  bench::result r;
  r.name = s.target == "gpu" ? "soak.readwrite.gpu" : "soak.readwrite";
  r.value = static_cast<double>(total[rw_checked_bytes] + compared);
  r.unit = "bytes";
  r.verified = true;
  r.mismatches = total[rw_wrong_bytes] + file_wrong;
  object_builder params;
  params.add("target", s.target)
      .add("file_bytes", s.file_bytes)
      .add("cache_bytes", s.cache_bytes)
      .add("cache_fraction", static_cast<double>(s.cache_bytes) / static_cast<double>(s.file_bytes))
      .add("writers", s.writers)
      .add("lanes_per_writer", launch.lanes)
      .add("frozen_groups", groups - s.writers)
      .add("rounds", static_cast<std::uint64_t>(s.rounds) * parts.size())
      .add("ops_per_writer_round", s.ops);
  r.params = add_lane_counts(params, total)
                 .add("file_bytes_compared", compared)
                 .add("wrong_file_bytes", file_wrong)
                 .add("failed_ops", total[rw_failed_ops])
                 .add("errors", errors)
                 .add("host_flushes", host_flushes)
                 .add("device_flushes", device_flushes + total[rw_device_flushes])
                 .add("failed_device_flushes", failed_device_flushes)
                 .add("model_disagreements", model_disagreements)
                 .add("hangs", 0)
                 .add("seconds", bench::round_significant(seconds_all, 3))
                 .add("error", first_error)
                 .add("runs", std::move(runs))
                 .done();
  return r;
}

void declare_rw_options(bench::command_spec& c, const std::string& file, const std::string& cache,
                        const std::string& writers, const std::string& ops,
                        const std::string& rounds) {
  c.option("rw-file", "BYTES", file, "file of the read/write soak (0: no soak.readwrite)")
      .option("rw-cache", "BYTES", cache, "cache of the read/write soak (under 1/32 of the file)")
      .option("rw-writers", "N", writers, "writers of the read/write soak (warps or threads)")
      .option("rw-ops", "N", ops, "ops per writer per round")
      .option("rw-rounds", "N", rounds, "rounds per controller and line size");
}

rw_setup rw_setup_from(const bench::parsed_args& args, const std::string& target) {
  rw_setup s;
  s.path = args.str("dir") + "/warpstore-reliability-rw-" + target + ".bin";
  s.file_bytes = args.size("rw-file");
  s.cache_bytes = args.size("rw-cache");
  s.writers = args.count("rw-writers");
  s.ops = static_cast<std::uint32_t>(args.count("rw-ops"));
  s.rounds = static_cast<std::uint32_t>(args.count("rw-rounds"));
  s.timeout_ns = bench::apply_options(args, options{}).timeout_ns * 4;  // --timeout-ms
  s.target = target;
  return s;
}

}  // namespace warpstore::reliability
