#include "warpstore/settings.h"

#include "warpstore/detail/parse_size.h"

#include <bit>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace warpstore {

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::uint64_t parse_uint(const std::string& name, const std::string& v) {
  std::size_t used = 0;
  unsigned long long x = 0;
  try {
    x = std::stoull(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || v[0] == '-')
    throw std::invalid_argument(name + ": expected a non-negative integer, got '" + v + "'");
  return x;
}
}  // namespace

std::size_t parse_size(const std::string& text) { return detail::parse_size(text); }

const char* to_string(controller_kind k) { return k == controller_kind::host ? "host" : "memory"; }
const char* to_string(direct_io d) {
  return d == direct_io::off ? "off" : (d == direct_io::on ? "on" : "auto");
}
const char* to_string(delivery d) { return d == delivery::gpu_pull ? "pull" : "copy"; }

controller_kind parse_controller(const std::string& s) {
  const std::string v = lower(s);
  if (v == "host") return controller_kind::host;
  if (v == "memory") return controller_kind::memory;
  throw std::invalid_argument("controller: expected host or memory, got '" + s + "'");
}
direct_io parse_direct(const std::string& s) {
  const std::string v = lower(s);
  if (v == "off" || v == "0") return direct_io::off;
  if (v == "auto") return direct_io::automatic;
  if (v == "on" || v == "1") return direct_io::on;
  throw std::invalid_argument("direct: expected off, auto or on, got '" + s + "'");
}
delivery parse_delivery(const std::string& s) {
  const std::string v = lower(s);
  if (v == "pull") return delivery::gpu_pull;
  if (v == "copy") return delivery::copy_engine;
  throw std::invalid_argument("delivery: expected pull or copy, got '" + s + "'");
}

options options::from_environment() {
  options o;
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
  if (const char* v = env("WARPSTORE_CACHE_BYTES")) o.cache_bytes = parse_size(v);
  if (const char* v = env("WARPSTORE_LINE_SIZE")) o.line_size = static_cast<std::uint32_t>(parse_size(v));
  if (const char* v = env("WARPSTORE_CACHE_WAYS"))
    o.ways = static_cast<std::uint32_t>(parse_uint("WARPSTORE_CACHE_WAYS", v));
  if (const char* v = env("WARPSTORE_CONTROLLER")) o.controller = parse_controller(v);
  if (const char* v = env("WARPSTORE_THREADS"))
    o.service_threads = static_cast<std::uint32_t>(parse_uint("WARPSTORE_THREADS", v));
  if (const char* v = env("WARPSTORE_QUEUES"))
    o.queue_pairs = static_cast<std::uint32_t>(parse_uint("WARPSTORE_QUEUES", v));
  if (const char* v = env("WARPSTORE_QUEUE_DEPTH"))
    o.queue_depth = static_cast<std::uint32_t>(parse_uint("WARPSTORE_QUEUE_DEPTH", v));
  if (const char* v = env("WARPSTORE_DIRECT")) o.direct = parse_direct(v);
  if (const char* v = env("WARPSTORE_DELIVERY")) o.deliver = parse_delivery(v);
  if (const char* v = env("WARPSTORE_URING_DEPTH"))
    o.uring_depth = static_cast<std::uint32_t>(parse_uint("WARPSTORE_URING_DEPTH", v));
  if (const char* v = env("WARPSTORE_COMBINE_WRITES"))
    o.combine_writes = parse_uint("WARPSTORE_COMBINE_WRITES", v) != 0;
  if (const char* v = env("WARPSTORE_WRITE_BEHIND_BYTES"))
    o.write_behind_bytes = parse_uint("WARPSTORE_WRITE_BEHIND_BYTES", v);
  if (const char* v = env("WARPSTORE_EAGER_WRITE_BACK"))
    o.eager_write_back = parse_uint("WARPSTORE_EAGER_WRITE_BACK", v) != 0;
  if (const char* v = env("WARPSTORE_OVERLAPPED_EVICTION"))
    o.overlapped_eviction = parse_uint("WARPSTORE_OVERLAPPED_EVICTION", v) != 0;
  if (const char* v = env("WARPSTORE_TIMEOUT_MS"))
    o.timeout_ns = parse_uint("WARPSTORE_TIMEOUT_MS", v) * 1'000'000ull;
  if (const char* v = env("WARPSTORE_BOUNDS_CHECK"))
    o.bounds_check = parse_uint("WARPSTORE_BOUNDS_CHECK", v) != 0;
  if (const char* v = env("WARPSTORE_WRITABLE"))
    o.writable = parse_uint("WARPSTORE_WRITABLE", v) != 0;
  return o;
}

void options::validate() const {
  auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
  if (line_size < 512 || line_size > 65536 || !std::has_single_bit(line_size))
    fail("line_size must be a power of two from 512 to 65536, got " + std::to_string(line_size));
  if (ways == 0 || ways > 64) fail("ways must be 1..64, got " + std::to_string(ways));
  if (cache_bytes < std::size_t{line_size} * ways)
    fail("cache of " + std::to_string(cache_bytes) + " bytes holds less than one set of " +
         std::to_string(ways) + " lines of " + std::to_string(line_size) + " bytes");
  if (service_threads == 0 || service_threads > 256)
    fail("service_threads must be 1..256, got " + std::to_string(service_threads));
  if (queue_pairs > 65535) fail("queue_pairs must be at most 65535");
  if (queue_depth < 2 || queue_depth > 4096 || !std::has_single_bit(queue_depth))
    fail("queue_depth must be a power of two from 2 to 4096, got " + std::to_string(queue_depth));
  if (uring_depth < 1 || uring_depth > 32768)
    fail("uring_depth must be 1..32768, got " + std::to_string(uring_depth));
  if (timeout_ns == 0) fail("timeout must be positive");
}

}  // namespace warpstore
