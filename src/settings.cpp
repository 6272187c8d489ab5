#include "warpstore/settings_table.h"

#include "warpstore/detail/parse_size.h"
#include "warpstore/error.h"

#include <sched.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>

namespace warpstore {

std::uint32_t process_cores() {
  // The cores are the ones this process may run on (its affinity mask, as
  // torchrun or a job scheduler sets it), and a node running one process a
  // GPU (LOCAL_WORLD_SIZE, set by torchrun) shares them among those.
  unsigned cores = std::thread::hardware_concurrency();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    cores = static_cast<unsigned>(CPU_COUNT(&set));
  unsigned local_processes = 1;
  if (const char* v = std::getenv("LOCAL_WORLD_SIZE")) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(v, &end, 10);
    if (end != v && *end == '\0' && n >= 1 && n <= 4096) local_processes = static_cast<unsigned>(n);
  }
  return std::max(1u, cores / local_processes);
}

std::uint32_t default_service_threads() {
  // A quarter of the process's cores, 1 to 4. Measured on the 16-core H100
  // machine: a gather alone (bench/python_fetch.py, 13 K rows of 512 B from
  // the page cache) takes 3.0 ms with 4 threads and 2.05 ms with 8, but
  // inside a training loop whose PyTorch CPU work keeps every core busy the
  // GraphSAGE epoch took 0.90 s with 4 threads and 1.39 s with 8. Each
  // process has its own engine: together they must not outnumber what the
  // machine can spare.
  return std::clamp(process_cores() / 4, 1u, 4u);
}

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::uint64_t parse_uint(const std::string& name, const std::string& v) {
  bool digits = !v.empty();
  for (char c : v) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  if (!digits)
    throw invalid_argument(name + ": expected a non-negative integer, got '" + v + "'");
  std::size_t used = 0;
  unsigned long long x = 0;
  try {
    x = std::stoull(v, &used);
  } catch (const std::out_of_range&) {
    throw invalid_argument(name + "=" + v + " is out of range: the largest integer is " +
                                std::to_string(UINT64_MAX));
  }
  if (used != v.size())
    throw invalid_argument(name + ": expected a non-negative integer, got '" + v + "'");
  return x;
}

// A size ("64K", "2GiB") from variable `name`; the parser's message names it.
std::uint64_t parse_size_var(const std::string& name, const std::string& v) {
  try {
    return detail::parse_size(v);
  } catch (const std::invalid_argument& e) {
    throw invalid_argument(name + ": " + e.what());
  }
}

constexpr std::uint64_t max_timeout_ms = UINT64_MAX / 1'000'000ull;  // ns still fit 64 bits
// Lines are counted in 32 bits (cache_ref::num_lines, and 2^31 at most).
constexpr std::uint64_t max_cache_lines = std::uint64_t{1} << 31;

}  // namespace

std::size_t parse_size(const std::string& text) {
  try {
    return detail::parse_size(text);
  } catch (const std::invalid_argument& e) {
    throw invalid_argument(e.what());  // detail::parse_size is header-only for the tools
  }
}

const char* to_string(controller_kind k) {
  switch (k) {
    case controller_kind::host: return "host";
    case controller_kind::memory: return "memory";
    case controller_kind::nvme_model: return "nvme-model";
    case controller_kind::nvme: return "nvme";
    case controller_kind::automatic: break;
  }
  return "auto";
}
const char* to_string(direct_io d) {
  return d == direct_io::off ? "off" : (d == direct_io::on ? "on" : "auto");
}
const char* to_string(delivery d) { return d == delivery::gpu_pull ? "pull" : "copy"; }

controller_kind parse_controller(const std::string& s) {
  const std::string v = lower(s);
  if (v == "host") return controller_kind::host;
  if (v == "memory") return controller_kind::memory;
  if (v == "auto") return controller_kind::automatic;
  if (v == "nvme-model") return controller_kind::nvme_model;
  if (v == "nvme") return controller_kind::nvme;
  throw invalid_argument("controller: expected auto, host, memory, nvme-model or nvme, got '" + s +
                         "'");
}
direct_io parse_direct(const std::string& s) {
  const std::string v = lower(s);
  if (v == "off" || v == "0") return direct_io::off;
  if (v == "auto") return direct_io::automatic;
  if (v == "on" || v == "1") return direct_io::on;
  throw invalid_argument("direct: expected off, auto or on, got '" + s + "'");
}
delivery parse_delivery(const std::string& s) {
  const std::string v = lower(s);
  if (v == "pull") return delivery::gpu_pull;
  if (v == "copy") return delivery::copy_engine;
  throw invalid_argument("delivery: expected pull or copy, got '" + s + "'");
}

// ---- the table ---------------------------------------------------------------

namespace {
using type = setting_type;
using group = setting_group;

// Accessors of one field, as plain function pointers.
#define WARPSTORE_NUMERIC(field)                                                   \
  .get = [](const options& o) -> std::uint64_t { return o.field; },                 \
  .put = [](options& o, std::uint64_t v) { o.field = static_cast<decltype(o.field)>(v); }
#define WARPSTORE_WORD(field, parse)                                                \
  .get_word = [](const options& o) { return to_string(o.field); },                  \
  .put_word = [](options& o, const std::string& w) { o.field = parse(w); }

const setting table[] = {
    {.name = "cache_bytes", .variable = "WARPSTORE_CACHE_BYTES", .python = "cache",
     .flag = "cache-bytes", .type = type::size, .min = 1,
     .range_note = "at least one set of lines",
     .doc = "bytes of GPU memory (host memory on the CPU target) for the cache, rounded down to "
            "whole sets; sizes like `2GiB`",
     WARPSTORE_NUMERIC(cache_bytes)},
    {.name = "line_size", .variable = "WARPSTORE_LINE_SIZE", .python = "line_size",
     .flag = "line-size", .type = type::size, .min = 512, .max = 65536, .power_of_two = true,
     .doc = "cache line, a power of two from 512 B to 64 KiB (Python row arrays default to their "
            "row size)",
     WARPSTORE_NUMERIC(line_size)},
    {.name = "ways", .variable = "WARPSTORE_CACHE_WAYS", .flag = "ways", .min = 1, .max = 64,
     .doc = "lines per set, 1 to 64", WARPSTORE_NUMERIC(ways)},
    {.name = "controller", .variable = "WARPSTORE_CONTROLLER", .python = "controller",
     .flag = "controller", .type = type::choice, .choices = "auto|host|memory|nvme-model|nvme",
     .doc = "`host` (io_uring service threads); `memory` (the file in pinned host memory: a "
            "read-only file's page cache mapped and pinned, else a copy); `nvme-model` (GPU "
            "threads drive the software NVMe device over the file; never picked by `auto`); `nvme` "
            "(GPU threads drive a real NVMe device through VFIO; the path is "
            "`nvme://<PCI address>[/ns<N>]`, namespace 1 unless given, and only `nvme` or "
            "`auto` take such a path); `auto`: `nvme` for an `nvme://` path, `memory` for a "
            "read-only file at most `WARPSTORE_MAPPED_MAX_BYTES` with at least 90 % of its pages "
            "in the page cache at open, `host` otherwise",
     WARPSTORE_WORD(controller, parse_controller)},
    {.name = "mapped_max_bytes", .variable = "WARPSTORE_MAPPED_MAX_BYTES", .flag = "mapped-max-bytes",
     .type = type::size,
     .default_note = "an eighth of the machine's memory",
     .doc = "the largest file `controller=auto` maps and pins (its pages stay in memory while it is "
            "open); 0: an eighth of the machine's memory",
     WARPSTORE_NUMERIC(mapped_max_bytes)},
    {.name = "service_threads", .variable = "WARPSTORE_THREADS", .python = "threads",
     .flag = "service-threads", .min = 1, .max = 256,
     .default_note = "a quarter of the cores it may run on, shared by LOCAL_WORLD_SIZE processes, 1 to 4",
     .doc = "threads a host controller's service units run on, 1 to 256; they belong to the "
            "process's one I/O engine, which every array shares and which grows to the largest "
            "count asked",
     WARPSTORE_NUMERIC(service_threads)},
    {.name = "queue_pairs", .variable = "WARPSTORE_QUEUES", .flag = "queues", .max = 65535,
     .doc = "queue pairs of a host, nvme-model or nvme controller; 0: one per multiprocessor, at most "
            "128",
     WARPSTORE_NUMERIC(queue_pairs)},
    {.name = "queue_depth", .variable = "WARPSTORE_QUEUE_DEPTH", .flag = "depth", .min = 2,
     .max = max_queue_depth, .power_of_two = true,
     .doc = "entries per queue pair, a power of two from 2 to 4096 (nvme: the device must grant them, "
            "CAP.MQES)", WARPSTORE_NUMERIC(queue_depth)},
    {.name = "direct", .variable = "WARPSTORE_DIRECT", .python = "direct", .flag = "direct",
     .type = type::choice, .choices = "auto|on|off",
     .doc = "`on`: O_DIRECT; `off`: through the page cache; `auto`: through the page cache when at "
            "least half of 256 sampled pages of the file are cached at open, O_DIRECT otherwise",
     WARPSTORE_WORD(direct, parse_direct)},
    {.name = "uring_depth", .variable = "WARPSTORE_URING_DEPTH", .flag = "uring-depth", .min = 1,
     .max = 32768, .doc = "io_uring entries per service unit, 1 to 32768",
     WARPSTORE_NUMERIC(uring_depth)},
    {.name = "timeout_ns", .variable = "WARPSTORE_TIMEOUT_MS", .python = "deadline",
     .flag = "timeout-ms", .type = type::milliseconds, .min = 1, .max = max_timeout_ms,
     .doc = "how long a wait may see no progress (its queue, its cache set) before it is an "
            "error; 16 times that in all at most",
     .get = [](const options& o) -> std::uint64_t { return o.timeout_ns / 1'000'000ull; },
     .put = [](options& o, std::uint64_t ms) { o.timeout_ns = ms * 1'000'000ull; }},
    {.name = "bounds_check", .variable = "WARPSTORE_BOUNDS_CHECK", .flag = "bounds-check",
     .type = type::flag, .max = 1, .doc = "device-side index checks", WARPSTORE_NUMERIC(bounds_check)},
    {.name = "writable", .variable = "WARPSTORE_WRITABLE", .flag = "writable", .type = type::flag,
     .max = 1,
     .doc = "open the file read-write; a read-only open refuses stores and WRITE commands",
     WARPSTORE_NUMERIC(writable)},
    // Tuning switches: measured options of the I/O path, on at their best known value.
    {.name = "deliver", .variable = "WARPSTORE_DELIVERY", .flag = "delivery", .type = type::choice,
     .group = group::tuning, .choices = "pull|copy",
     .doc = "`pull`: the waiting warp copies the bytes from pinned staging; `copy`: the controller "
            "pushes them with the copy engine",
     WARPSTORE_WORD(deliver, parse_delivery)},
    {.name = "combine_writes", .variable = "WARPSTORE_COMBINE_WRITES", .flag = "combine-writes",
     .type = type::flag, .group = group::tuning, .max = 1,
     .doc = "1: buffered WRITEs of all service threads go through one write thread that merges "
            "neighbours into one `pwritev`; 0: each service thread writes through its io_uring",
     WARPSTORE_NUMERIC(combine_writes)},
    {.name = "combine_reads", .variable = "WARPSTORE_COMBINE_READS", .flag = "combine-reads",
     .type = type::flag, .group = group::tuning, .max = 1,
     .doc = "1: a service thread sends the READs of a round that are neighbours in the file as one "
            "`readv`; 0: one read per command",
     WARPSTORE_NUMERIC(combine_reads)},
    {.name = "read_ahead", .variable = "WARPSTORE_READ_AHEAD", .flag = "read-ahead",
     .type = type::size, .group = group::tuning, .max = 16u << 20,
     .range_note = "0, or a power of two from 4 KiB to 16 MiB",
     .doc = "host controller, read-only file read with O_DIRECT: a whole extent of this many "
            "bytes (a power of two) is read once three misses fall in it close together (more, up "
            "to half its lines, where the extents read so far served fewer lines than they cost: "
            "`read_ahead_trigger` in stats), and its lines are served from memory (dense batches "
            "read like the kernel's readahead); sparse misses are read line by line; 0: off",
     WARPSTORE_NUMERIC(read_ahead)},
    {.name = "read_ahead_cache", .variable = "WARPSTORE_READ_AHEAD_CACHE",
     .flag = "read-ahead-cache", .type = type::size, .group = group::tuning,
     .range_note = "at least one extent of `read_ahead`",
     .doc = "bytes of host memory for the extents `read_ahead` holds (replaced by a clock)",
     WARPSTORE_NUMERIC(read_ahead_cache)},
    {.name = "queue_spread", .variable = "WARPSTORE_QUEUE_SPREAD", .flag = "queue-spread",
     .type = type::flag, .group = group::tuning, .max = 1,
     .doc = "1: the warps of one multiprocessor spread over the queue pairs; 0: one pair per "
            "multiprocessor",
     WARPSTORE_NUMERIC(queue_spread)},
    {.name = "gather_sm_share", .variable = "WARPSTORE_GATHER_SM_SHARE",
     .flag = "gather-sm-share", .group = group::tuning, .max = 64,
     .doc = "Python gathers on the GPU: 0 on every multiprocessor; N (1 to 64) on 1/N of them, "
            "leaving the rest whole to kernels beside an asynchronous gather",
     WARPSTORE_NUMERIC(gather_sm_share)},
    {.name = "bulk_chunk", .variable = "WARPSTORE_BULK_CHUNK", .flag = "bulk-chunk",
     .type = type::size, .group = group::tuning, .min = 64u << 10, .max = 4u << 20,
     .power_of_two = true,
     .doc = "bulk reads (`Array.read`): the most bytes one thread reads into a pinned buffer "
            "and copies to the GPU at a time, a power of two from 64 KiB to 4 MiB",
     WARPSTORE_NUMERIC(bulk_chunk)},
    {.name = "gather_sort_rows", .variable = "WARPSTORE_GATHER_SORT_ROWS",
     .flag = "gather-sort-rows", .group = group::tuning, .max = std::uint64_t{1} << 31,
     .doc = "Python gathers on the GPU over the memory controller: one of at least this many "
            "positions reads its rows in file order (indices radix-sorted first) while the "
            "array's large gathers miss; 0: never",
     WARPSTORE_NUMERIC(gather_sort_rows)},
    {.name = "gather_sort_bytes", .variable = "WARPSTORE_GATHER_SORT_BYTES",
     .flag = "gather-sort-bytes", .type = type::size, .group = group::tuning,
     .doc = "sorted gathers (`gather_sort_rows`) only for arrays larger than this: "
            "within about 512 MiB a GPU reads random rows of host memory as fast as sorted ones",
     WARPSTORE_NUMERIC(gather_sort_bytes)},
    {.name = "gather_miss_admit", .variable = "WARPSTORE_GATHER_MISS_ADMIT",
     .flag = "gather-miss-admit", .group = group::tuning, .max = 1024,
     .doc = "Python gathers on the GPU of rows smaller than a line, over the memory "
            "controller, not sorted: while the array's gathers miss on 3 lookups in 4 or more, "
            "a miss fills its line one time in this many and reads the row straight from host "
            "memory otherwise; 0 or 1: every miss fills",
     WARPSTORE_NUMERIC(gather_miss_admit)},
    {.name = "memory_fill_together", .variable = "WARPSTORE_MEMORY_FILL_TOGETHER",
     .flag = "memory-fill-together", .type = type::size, .group = group::tuning,
     .max = 64u << 10,
     .doc = "memory controller: a warp missing several lines at once fills those of at most this "
            "many bytes together, each by a share of its lanes; larger lines one after another, "
            "each by the whole warp; 0: always one after another",
     WARPSTORE_NUMERIC(memory_fill_together)},
    {.name = "fetch_priority", .variable = "WARPSTORE_FETCH_PRIORITY", .flag = "fetch-priority",
     .type = type::flag, .group = group::tuning, .max = 1,
     .doc = "1: the PyG feature store's fetch-ahead gathers run on a highest-priority CUDA stream; "
            "0: on a stream of default priority",
     WARPSTORE_NUMERIC(fetch_priority)},
    {.name = "write_behind_bytes", .variable = "WARPSTORE_WRITE_BEHIND_BYTES",
     .flag = "write-behind-bytes", .type = type::size, .group = group::tuning,
     .doc = "every time this many bytes were written, the kernel is asked to start writing them to "
            "storage (`sync_file_range`), so the final fdatasync finds less left; 0: off",
     WARPSTORE_NUMERIC(write_behind_bytes)},
    {.name = "eager_write_back", .variable = "WARPSTORE_EAGER_WRITE_BACK",
     .flag = "eager-write-back", .type = type::flag, .group = group::tuning, .max = 1,
     .doc = "1: a `write_span` that completes a whole write-back cluster (32 lines, all dirty, "
            "none in use) writes it back at once; 0: lines go at eviction or flush",
     WARPSTORE_NUMERIC(eager_write_back)},
    {.name = "overlapped_eviction", .variable = "WARPSTORE_OVERLAPPED_EVICTION",
     .flag = "overlapped-eviction", .type = type::flag, .group = group::tuning, .max = 1,
     .doc = "1: a warp evicting a dirty line sends its WRITE and its own READ together; 0: write "
            "back, wait, look again",
     WARPSTORE_NUMERIC(overlapped_eviction)},
};
#undef WARPSTORE_NUMERIC
#undef WARPSTORE_WORD

// "1 GiB", "32 MiB", "4096": whole binary units from a MiB up.
std::string size_words(std::uint64_t v) {
  static const char* const units[] = {"MiB", "GiB", "TiB"};
  if (v < (std::uint64_t{1} << 20) || v % (std::uint64_t{1} << 20) != 0) return std::to_string(v);
  v >>= 20;
  unsigned u = 0;
  while (u + 1 < std::size(units) && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + " " + units[u];
}

std::string default_words(const setting& s) {
  if (*s.default_note) return s.default_note;
  const options defaults;
  switch (s.type) {
    case type::choice: return std::string("`") + s.get_word(defaults) + "`";
    case type::size: return size_words(s.get(defaults));
    case type::milliseconds: {
      const std::uint64_t ms = s.get(defaults);
      return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
    }
    default: return std::to_string(s.get(defaults));
  }
}

void markdown_table(std::string& out, setting_group g) {
  out += "| setting (`options`) | environment variable | Python | default | meaning |\n";
  out += "| --- | --- | --- | --- | --- |\n";
  for (const setting& s : table) {
    if (s.group != g) continue;
    const bool ms = s.type == type::milliseconds;
    out += std::string("| `") + s.name + "` | `" + s.variable + "`" + (ms ? " (ms)" : "") + " | ";
    if (*s.python) out += std::string("`") + s.python + "`" + (ms ? " (s)" : "") + " ";
    out += "| " + default_words(s) + " | " + s.doc + " |\n";
  }
}
}  // namespace

std::span<const setting> settings_table() { return table; }

const setting* find_setting(std::string_view name) {
  for (const setting& s : table)
    if (name == s.name || name == s.variable || (*s.python && name == s.python) || name == s.flag)
      return &s;
  return nullptr;
}

std::string setting::range() const {
  if (*range_note) return range_note;
  switch (type) {
    case setting_type::flag: return "0 or 1";
    case setting_type::choice: {
      std::string words = choices;
      const auto bar = words.rfind('|');
      words.replace(bar, 1, " or ");
      for (auto i = words.find('|'); i != std::string::npos; i = words.find('|')) words.replace(i, 1, ", ");
      return words;
    }
    case setting_type::milliseconds:
      return "positive, from " + std::to_string(min) + " to " + std::to_string(max) + " ms";
    default:
      return (power_of_two ? "a power of two from " : "from ") + std::to_string(min) + " to " +
             std::to_string(max);
  }
}

std::string setting::text(const options& o) const {
  return type == setting_type::choice ? std::string(get_word(o)) : std::to_string(get(o));
}

void setting::apply(options& o, const std::string& text, const std::string& source) const {
  if (type == setting_type::choice) {
    try {
      put_word(o, text);
    } catch (const std::invalid_argument& e) {
      throw invalid_argument(source + ": " + e.what());
    }
    return;
  }
  const std::uint64_t v = type == setting_type::size ? parse_size_var(source, text) : parse_uint(source, text);
  if (v < min || v > max || (power_of_two && !std::has_single_bit(v)))
    throw invalid_argument(source + "=" + text + " is out of range: " + name + " must be " +
                                range());
  put(o, v);
}

std::string settings_markdown() {
  std::string out;
  markdown_table(out, group::core);
  out += "\nTuning switches: measured options of the I/O path, each on its best known value "
         "(BENCHMARKS.md); set them to compare.\n\n";
  markdown_table(out, group::tuning);
  return out;
}

options options::from_environment() {
  options o;
  for (const setting& s : table) {
    const char* v = std::getenv(s.variable);
    if (v != nullptr && *v != '\0') s.apply(o, v, s.variable);
  }
  return o;
}

void options::validate() const {
  auto fail = [](const std::string& m) { throw invalid_argument(m); };
  // "service_threads must be from 1 to 256 (WARPSTORE_THREADS), got 0".
  for (const setting& s : table) {
    if (s.type != type::size && s.type != type::count) continue;
    const std::uint64_t v = s.get(*this);
    if (v < s.min || v > s.max || (s.power_of_two && !std::has_single_bit(v)))
      fail(std::string(s.name) + " must be " + s.range() + " (" + s.variable + "), got " +
           std::to_string(v));
  }
  if (cache_bytes < std::size_t{line_size} * ways)
    fail("cache of " + std::to_string(cache_bytes) + " bytes (WARPSTORE_CACHE_BYTES) holds less "
         "than one set of " + std::to_string(ways) + " lines of " + std::to_string(line_size) +
         " bytes");
  if (cache_bytes / line_size / ways * ways > max_cache_lines)
    fail("cache of " + std::to_string(cache_bytes) + " bytes (WARPSTORE_CACHE_BYTES) is more than " +
         std::to_string(max_cache_lines) + " lines of " + std::to_string(line_size) +
         " bytes: at most " + std::to_string(max_cache_lines * line_size) + " bytes");
  if (read_ahead != 0 && (!std::has_single_bit(read_ahead) || read_ahead < 4096))
    fail("read_ahead must be 0 or a power of two from 4 KiB to 16 MiB (WARPSTORE_READ_AHEAD), "
         "got " + std::to_string(read_ahead));
  if (read_ahead != 0 && read_ahead_cache < read_ahead)
    fail("read_ahead_cache of " + std::to_string(read_ahead_cache) +
         " bytes (WARPSTORE_READ_AHEAD_CACHE) holds no extent of " + std::to_string(read_ahead) +
         " bytes (WARPSTORE_READ_AHEAD)");
  if (timeout_ns == 0) fail("timeout must be positive (WARPSTORE_TIMEOUT_MS), got 0");
}

}  // namespace warpstore
