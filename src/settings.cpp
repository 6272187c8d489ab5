#include "warpstore/settings.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "warpstore/detail/parse_size.h"
#include "warpstore/error.h"

namespace warpstore {

std::uint32_t default_service_threads() {
  // A quarter of the cores, 1 to 4. Measured on the 16-core H100 machine:
  // a gather alone (bench/python_fetch.py, 13 K rows of 512 B from the page
  // cache) takes 3.0 ms with 4 threads and 2.05 ms with 8, but inside a
  // training loop whose PyTorch CPU work keeps every core busy the GraphSAGE
  // epoch took 0.90 s with 4 threads and 1.39 s with 8.
  return std::clamp(std::thread::hardware_concurrency() / 4, 1u, 4u);
}

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::uint64_t parse_uint(const std::string& name, const std::string& v) {
  bool digits = !v.empty();
  for (char c : v) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  if (!digits) throw invalid_argument(name + ": expected a non-negative integer, got '" + v + "'");
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

// The range of one numeric setting, checked where it is read from the
// environment (naming the variable and the text given) and in validate()
// (naming the setting).
struct limits {
  const char* setting;
  const char* variable;
  std::uint64_t lo, hi;
  bool power_of_two;
  std::string range() const {
    return (power_of_two ? "a power of two from " : "from ") + std::to_string(lo) + " to " +
           std::to_string(hi);
  }
  bool admits(std::uint64_t v) const {
    return v >= lo && v <= hi && (!power_of_two || std::has_single_bit(v));
  }
  // From the environment: "WARPSTORE_THREADS=5000000000 is out of range: ...".
  std::uint64_t checked(const std::string& text, std::uint64_t v) const {
    if (!admits(v))
      throw invalid_argument(std::string(variable) + "=" + text + " is out of range: " + setting +
                             " must be " + range());
    return v;
  }
  // From validate(): "service_threads must be from 1 to 256 (WARPSTORE_THREADS), got 0".
  void check(std::uint64_t v) const {
    if (!admits(v))
      throw invalid_argument(std::string(setting) + " must be " + range() + " (" + variable +
                             "), got " + std::to_string(v));
  }
};

constexpr std::uint64_t max_timeout_ms = UINT64_MAX / 1'000'000ull;  // ns still fit 64 bits
const limits line_size_limits{"line_size", "WARPSTORE_LINE_SIZE", 512, 65536, true};
const limits ways_limits{"ways", "WARPSTORE_CACHE_WAYS", 1, 64, false};
const limits threads_limits{"service_threads", "WARPSTORE_THREADS", 1, 256, false};
const limits queues_limits{"queue_pairs", "WARPSTORE_QUEUES", 0, 65535, false};
const limits depth_limits{"queue_depth", "WARPSTORE_QUEUE_DEPTH", 2, max_queue_depth, true};
const limits uring_limits{"uring_depth", "WARPSTORE_URING_DEPTH", 1, 32768, false};
const limits timeout_ms_limits{"the timeout (ms)", "WARPSTORE_TIMEOUT_MS", 1, max_timeout_ms,
                               false};
// Lines are counted in 32 bits (cache_ref::num_lines, and 2^31 at most).
constexpr std::uint64_t max_cache_lines = std::uint64_t{1} << 31;

// 0 | 1 switches.
bool parse_switch(const std::string& name, const std::string& v) {
  const std::uint64_t x = parse_uint(name, v);
  if (x > 1) throw invalid_argument(name + "=" + v + " is out of range: expected 0 or 1");
  return x != 0;
}
}  // namespace

std::size_t parse_size(const std::string& text) {
  try {
    return detail::parse_size(text);
  } catch (const std::invalid_argument& e) {
    throw invalid_argument(e.what());  // detail::parse_size is header-only for the tools
  }
}

const char* to_string(controller_kind k) { return k == controller_kind::host ? "host" : "memory"; }
const char* to_string(direct_io d) {
  return d == direct_io::off ? "off" : (d == direct_io::on ? "on" : "auto");
}
const char* to_string(delivery d) { return d == delivery::gpu_pull ? "pull" : "copy"; }

controller_kind parse_controller(const std::string& s) {
  const std::string v = lower(s);
  if (v == "host") return controller_kind::host;
  if (v == "memory") return controller_kind::memory;
  throw invalid_argument("controller: expected host or memory, got '" + s + "'");
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

options options::from_environment() {
  options o;
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
  auto uint32 = [](const limits& l, const std::string& v) {
    return static_cast<std::uint32_t>(l.checked(v, parse_uint(l.variable, v)));
  };
  if (const char* v = env("WARPSTORE_CACHE_BYTES")) {
    o.cache_bytes = parse_size_var("WARPSTORE_CACHE_BYTES", v);
    if (o.cache_bytes == 0)
      throw invalid_argument(std::string("WARPSTORE_CACHE_BYTES=") + v +
                             " is out of range: the cache must hold at least one set of lines");
  }
  if (const char* v = env("WARPSTORE_LINE_SIZE"))
    o.line_size = static_cast<std::uint32_t>(
        line_size_limits.checked(v, parse_size_var("WARPSTORE_LINE_SIZE", v)));
  if (const char* v = env("WARPSTORE_CACHE_WAYS")) o.ways = uint32(ways_limits, v);
  // Words: the parser's message, after the variable's name.
  auto word = [](const char* name, const char* v, auto parse) {
    try {
      return parse(v);
    } catch (const std::invalid_argument& e) {
      throw invalid_argument(std::string(name) + ": " + e.what());
    }
  };
  if (const char* v = env("WARPSTORE_CONTROLLER"))
    o.controller = word("WARPSTORE_CONTROLLER", v, parse_controller);
  if (const char* v = env("WARPSTORE_THREADS")) o.service_threads = uint32(threads_limits, v);
  if (const char* v = env("WARPSTORE_QUEUES")) o.queue_pairs = uint32(queues_limits, v);
  if (const char* v = env("WARPSTORE_QUEUE_DEPTH")) o.queue_depth = uint32(depth_limits, v);
  if (const char* v = env("WARPSTORE_DIRECT")) o.direct = word("WARPSTORE_DIRECT", v, parse_direct);
  if (const char* v = env("WARPSTORE_DELIVERY"))
    o.deliver = word("WARPSTORE_DELIVERY", v, parse_delivery);
  if (const char* v = env("WARPSTORE_URING_DEPTH")) o.uring_depth = uint32(uring_limits, v);
  if (const char* v = env("WARPSTORE_COMBINE_WRITES"))
    o.combine_writes = parse_switch("WARPSTORE_COMBINE_WRITES", v);
  if (const char* v = env("WARPSTORE_WRITE_BEHIND_BYTES"))
    o.write_behind_bytes = parse_size_var("WARPSTORE_WRITE_BEHIND_BYTES", v);
  if (const char* v = env("WARPSTORE_EAGER_WRITE_BACK"))
    o.eager_write_back = parse_switch("WARPSTORE_EAGER_WRITE_BACK", v);
  if (const char* v = env("WARPSTORE_OVERLAPPED_EVICTION"))
    o.overlapped_eviction = parse_switch("WARPSTORE_OVERLAPPED_EVICTION", v);
  if (const char* v = env("WARPSTORE_TIMEOUT_MS")) {
    const std::uint64_t ms = parse_uint("WARPSTORE_TIMEOUT_MS", v);
    if (ms == 0)
      throw invalid_argument(std::string("WARPSTORE_TIMEOUT_MS=") + v +
                             " is out of range: the timeout must be positive (from 1 to " +
                             std::to_string(max_timeout_ms) + " ms)");
    o.timeout_ns = timeout_ms_limits.checked(v, ms) * 1'000'000ull;
  }
  if (const char* v = env("WARPSTORE_BOUNDS_CHECK"))
    o.bounds_check = parse_switch("WARPSTORE_BOUNDS_CHECK", v);
  if (const char* v = env("WARPSTORE_WRITABLE")) o.writable = parse_switch("WARPSTORE_WRITABLE", v);
  return o;
}

void options::validate() const {
  auto fail = [](const std::string& m) { throw invalid_argument(m); };
  line_size_limits.check(line_size);
  ways_limits.check(ways);
  if (cache_bytes < std::size_t{line_size} * ways)
    fail("cache of " + std::to_string(cache_bytes) + " bytes (WARPSTORE_CACHE_BYTES) holds less "
         "than one set of " + std::to_string(ways) + " lines of " + std::to_string(line_size) +
         " bytes");
  if (cache_bytes / line_size / ways * ways > max_cache_lines)
    fail("cache of " + std::to_string(cache_bytes) + " bytes (WARPSTORE_CACHE_BYTES) is more than " +
         std::to_string(max_cache_lines) + " lines of " + std::to_string(line_size) +
         " bytes: at most " + std::to_string(max_cache_lines * line_size) + " bytes");
  threads_limits.check(service_threads);
  queues_limits.check(queue_pairs);
  depth_limits.check(queue_depth);
  uring_limits.check(uring_depth);
  if (timeout_ns == 0) fail("timeout must be positive (WARPSTORE_TIMEOUT_MS), got 0");
}

}  // namespace warpstore
