#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>
#include <vector>

#include "warpstore/cache.cuh"
#include "warpstore/error.h"

namespace warpstore {

namespace {
constexpr std::uint32_t counter_shards = 64;
}

cache::cache(std::size_t bytes, std::uint32_t line_size, std::uint32_t ways) {
  options o;
  o.cache_bytes = bytes;
  o.line_size = line_size;
  o.ways = ways;
  o.validate();  // line size and ways
  // Whole sets, any number of them (set_of maps a hash onto [0, num_sets)
  // with a multiply), so "3MiB" gets 3 MiB and not the 2 MiB of a power of two.
  const std::size_t sets = bytes / (std::size_t{line_size} * ways);
  const std::size_t lines = sets * ways;
  if (lines > (std::size_t{1} << 31))
    throw invalid_argument("cache of " + std::to_string(lines) + " lines is too large");
  const std::size_t free_mem = runtime::free_device_memory();
  const std::size_t evict_words = std::bit_floor(lines);
  const std::size_t need = lines * (line_size + 12) + sets * 12 + evict_words * 4;
  if (need > free_mem)
    throw invalid_argument("a cache of " + std::to_string(bytes) + " bytes needs " +
                           std::to_string(need) + " bytes of " +
                           (runtime::gpu_build() ? "GPU" : "host") + " memory, " +
                           std::to_string(free_mem) + " are available: choose a smaller cache");
  lines_ = runtime::make_device<std::byte>(lines * line_size, false);
  tags_ = runtime::make_device<std::uint64_t>(lines);
  states_ = runtime::make_device<std::uint32_t>(lines);
  // Locks, clock hands and priority counts of the sets, then the eviction
  // counters.
  set_word_count_ = 3 * sets + evict_words;
  set_words_ = runtime::make_device<std::uint32_t>(set_word_count_);
  counters_ = runtime::make_device<cache_counters>(counter_shards);
  sources_ = runtime::make_device<cache_source>(max_sources);
  ref_.lines = lines_.get();
  ref_.tags = tags_.get();
  ref_.states = states_.get();
  ref_.set_locks = set_words_.get();
  ref_.set_hands = set_words_.get() + sets;
  ref_.set_urgent = set_words_.get() + 2 * sets;
  ref_.evictions_in_flight = set_words_.get() + 3 * sets;
  ref_.eviction_mask = static_cast<std::uint32_t>(evict_words - 1);
  ref_.counters = counters_.get();
  ref_.sources = sources_.get();
  ref_.num_lines = static_cast<std::uint32_t>(lines);
  ref_.ways = ways;
  ref_.num_sets = static_cast<std::uint32_t>(sets);
  ref_.line_size = line_size;
  ref_.line_shift = static_cast<std::uint32_t>(std::countr_zero(line_size));
  ref_.counter_shards = counter_shards;
}

std::uint32_t cache::next_source_id() {
  std::lock_guard<std::mutex> lock(sources_mutex_);
  if (!free_sources_.empty()) {
    const std::uint32_t id = free_sources_.back();
    free_sources_.pop_back();
    return id;
  }
  if (next_source_ >= max_sources)
    throw invalid_argument("cache: more than " + std::to_string(max_sources - 1) +
                                " arrays share one cache at once");
  return next_source_++;
}

void cache::register_source(std::uint32_t id, const cache_source& where) {
  {
    std::lock_guard<std::mutex> lock(sources_mutex_);
    if (id == 0 || id >= next_source_ ||
        std::find(free_sources_.begin(), free_sources_.end(), id) != free_sources_.end())
      throw invalid_argument("cache: source id " + std::to_string(id) + " was not handed out");
  }
  runtime::copy_to_device(sources_.get() + id, &where, sizeof where);
}

void cache::retire_source(std::uint32_t id) {
  std::lock_guard<std::mutex> lock(sources_mutex_);
  if (id == 0 || id >= next_source_ ||
      std::find(free_sources_.begin(), free_sources_.end(), id) != free_sources_.end())
    throw invalid_argument("cache: source id " + std::to_string(id) + " is not in use");
  const std::size_t n = ref_.num_lines;
  std::vector<std::uint64_t> tags(n);
  std::vector<std::uint32_t> states(n);
  runtime::copy_to_host(tags.data(), tags_.get(), n * sizeof(std::uint64_t));
  runtime::copy_to_host(states.data(), states_.get(), n * sizeof(std::uint32_t));
  bool changed = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (tags[i] == 0 || cache_ref::source_of(tags[i]) != id) continue;
    const std::uint32_t busy_bits = line_state::pins | line_state::busy | line_state::dirty;
    if ((states[i] & busy_bits) != 0)
      throw logic_error("cache: source " + std::to_string(id) + " retired with line " +
                             std::to_string(i) + " still pinned, being filled or dirty");
    tags[i] = 0;
    states[i] = 0;
    changed = true;
  }
  if (changed) {
    runtime::copy_to_device(tags_.get(), tags.data(), n * sizeof(std::uint64_t));
    runtime::copy_to_device(states_.get(), states.data(), n * sizeof(std::uint32_t));
  }
  free_sources_.push_back(id);
}

cache_stats cache::stats() const {
  cache_counters c[counter_shards];
  runtime::copy_to_host(c, counters_.get(), sizeof c);
  cache_stats s;
  for (const cache_counters& k : c) {
    s.hits += k.hits;
    s.misses += k.misses;
    s.evictions += k.evictions;
    s.writebacks += k.writebacks;
    s.bytes_read += k.bytes_read;
    s.retries += k.retries;
    s.errors += k.errors;
    s.overlapped_evictions += k.overlapped_evictions;
    s.read_around += k.read_around;
  }
  return s;
}

void cache::reset_stats() {
  runtime::memset_device(counters_.get(), 0, sizeof(cache_counters) * counter_shards);
}

void cache::clear() {
  runtime::memset_device(tags_.get(), 0, sizeof(std::uint64_t) * ref_.num_lines);
  runtime::memset_device(states_.get(), 0, sizeof(std::uint32_t) * ref_.num_lines);
  runtime::memset_device(set_words_.get(), 0, sizeof(std::uint32_t) * set_word_count_);
}

}  // namespace warpstore
