// The key-value crash workload: state k = the store after k
// committed SET batches. Batches are deterministic from the seed and k; each
// overwrites many keys of earlier batches, so a batch cut short must be
// undone for the store to match any committed state. One source
// (kv_workload.inl) compiled for the CPU target (kv_workload_cpu.cpp) and
// the GPU (kv_workload_gpu.cu); both define make_kv_workload().
#pragma once

#include <cstdint>
#include <vector>

#include "apps/kvstore/kvstore.cuh"
#include "tests/crash/crash_workload.h"

namespace warpstore::crash {

struct kv_shape {
  static constexpr std::uint64_t buckets = 256;      // 8192 slots
  static constexpr std::uint64_t universe = 1024;    // keys 1 .. 1024
  static constexpr std::uint64_t batch_keys = 200;   // distinct keys per batch
  static constexpr std::uint32_t log_regions = 16;
};

// Batch k (k >= 1) of seed `seed`: keys in batch order and their values.
void kv_batch(std::uint64_t seed, std::uint64_t k, std::vector<std::uint64_t>& keys,
              std::vector<kv::value>& values);

// The whole data file after k committed batches, computed on the CPU with a
// plain vector (independently of the store's kernels).
std::vector<std::byte> kv_model(std::uint64_t seed, std::uint64_t k);

// Tests: opens the store of `e` (recovering it), starts the next batch and
// stops it at `point` as a crash would, leaving the files as they are.
void kv_cut_batch(const env& e, kv::crash_point point);

// The files of the workload in e.dir.
std::string kv_data_path(const env& e);
std::string kv_log_path(const env& e);

}  // namespace warpstore::crash
