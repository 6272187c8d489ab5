// The memory controller: the whole file in pinned host memory; a warp that
// misses executes its own READ over PCIe, with no CPU on the path.
#pragma once

#include "warpstore/controller.h"
#include "warpstore/runtime.h"

namespace warpstore {

class memory_controller final : public controller {
 public:
  // Reads the whole file into pinned memory with `loader_threads` threads.
  memory_controller(std::shared_ptr<backing_file> file, unsigned loader_threads);

  const char* name() const override { return "memory"; }
  io_ref device_ref() const override;
  controller_stats stats() const override { return {}; }  // commands run on the GPU, uncounted
  const std::byte* data() const { return data_.get(); }

 private:
  runtime::host_mapped_ptr<std::byte> data_;
  std::uint64_t capacity_blocks_;
};

}  // namespace warpstore
