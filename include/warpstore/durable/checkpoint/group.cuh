// The host side of a checkpoint group: registration, the file, the host
// forms of checkpoint and restore, and the outcome of the device forms.
// Part of durable/checkpoint.cuh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "warpstore/array.cuh"
#include "warpstore/controller.h"
#include "warpstore/durable/checkpoint/layout.cuh"
#include "warpstore/durable/checkpoint/ref.cuh"
#include "warpstore/error.h"
#include "warpstore/nvme.h"
#include "warpstore/runtime.h"
#include "warpstore/settings.h"

namespace warpstore {

// Raised for a checkpoint or restore that failed: names the group's file,
// the phase, the buffer and byte offset, the LBA and the NVMe status. `info`
// carries what the thrower knows (path, kind, LBA); its status is `st`, and
// its kind, where not given, follows from `st` (runtime when `st` is ok).
class checkpoint_error : public ::warpstore::detail::error_as<std::runtime_error> {
 public:
  checkpoint_error(const std::string& what, checkpoint_phase phase, nvme::status st,
                   error_info info = {})
      : error_as(with_status(std::move(info), st), what), phase_(phase) {}
  checkpoint_phase phase() const { return phase_; }

 private:
  static error_info with_status(error_info info, nvme::status st) {
    info.status = st;
    if (info.kind == error_kind::none) info.kind = st.success() ? error_kind::runtime : kind_of(st);
    return info;
  }
  checkpoint_phase phase_;
};

// What the file held, and what restore did with it.
struct restore_result {
  checkpoint_outcome outcome = checkpoint_outcome::none;  // restored or empty
  std::uint64_t sequence = 0;  // the checkpoint restored (0 when empty)
  std::uint32_t skipped = 0;   // newer records whose data failed its checksum
  bool restored() const { return outcome == checkpoint_outcome::restored; }
};

// Where the pieces of a group's file are (byte offsets).
struct checkpoint_layout {
  std::uint64_t record_offset[2] = {0, ckpt::record_stride};
  std::uint64_t slot_offset[2] = {0, 0};
  std::uint64_t data_bytes = 0;   // per slot
  std::uint64_t file_bytes = 0;   // the smallest file that holds both slots
  std::vector<std::uint64_t> buffer_offset;  // within a slot, per buffer
  std::uint64_t layout_hash = 0;
};

struct checkpoint_options {
  // Staging for buffer tails and arrays (rounded to whole sets of one chunk
  // per lane; at least two sets).
  std::size_t scratch_bytes = std::size_t{16} << 20;
  // A file holding valid records of other buffers (another layout) is refused
  // at open unless this is set; then its next checkpoint overwrites them.
  bool discard_foreign = false;
  // Warps of the host form's launches (0: enough for the queues).
  std::uint32_t warps = 0;
};

using controller_opener =
    std::function<std::shared_ptr<controller>(const std::string& path, const options& opts)>;

class checkpoint_group {
 public:
  checkpoint_group();
  ~checkpoint_group();
  checkpoint_group(const checkpoint_group&) = delete;
  checkpoint_group& operator=(const checkpoint_group&) = delete;

  // Registration, before open(). A device range: 16-byte aligned GPU memory
  // (host memory on the CPU target), bytes > 0.
  checkpoint_group& add(void* device, std::uint64_t bytes, std::string name);
  // A warpstore array (its elements, read and written through its cache).
  // The array must outlive the group; restoring needs it writable.
  template <class T>
  checkpoint_group& add(array<T>& a, std::string name) {
    return add_array(a, a.byte_ref(), a.size() * sizeof(T), std::move(name));
  }

  // Sizes `path` for the group (creating it, or growing it, with zeros),
  // opens it read-write through `open` (default: make_controller), reads its
  // records and sets the next slot. Raises if the file holds valid records of
  // another layout (unless discard_foreign), or on any I/O failure.
  void open(const std::string& path, const options& opts,
            const controller_opener& open = nullptr, const checkpoint_options& copts = {});
  // The layout of the file for these buffers (before or after open).
  checkpoint_layout layout() const;

  // Host forms. checkpoint() returns the sequence it committed, once
  // durable; raises checkpoint_error on failure (the previous checkpoint
  // stays the newest). restore() brings back the newest checkpoint whose data
  // verifies, or reports empty (nothing touched); raises on I/O failure,
  // on a layout mismatch, or when no record's data verifies.
  std::uint64_t checkpoint();
  restore_result restore();

  // Device form: kernels call ref().checkpoint(warp, warps) / restore(...);
  // then finish() reads what the operation did, raises its failure, makes a
  // memory controller's writes durable, and returns the outcome.
  checkpoint_ref ref() const;
  checkpoint_outcome finish();

  // The sequence of the newest valid record seen (0: none).
  std::uint64_t latest_sequence() const;
  std::uint64_t next_sequence() const;
  const std::string& path() const { return path_; }
  const std::shared_ptr<controller>& shared_controller() const { return controller_; }
  std::uint32_t buffer_count() const { return static_cast<std::uint32_t>(buffers_.size()); }

 private:
  checkpoint_group& add_array(detail::array_base& a, const array_ref<std::byte>& view,
                              std::uint64_t bytes, std::string name);
  void require_open(const char* what) const;
  checkpoint_control read_control() const;
  // Runs one operation on the target (kernel or threads), waits, and
  // checks it like finish().
  checkpoint_outcome run_and_check(int op, std::uint32_t warps, const char* what);
  checkpoint_outcome finish_named(const char* what);
  [[noreturn]] void raise(const checkpoint_control& c, const char* what) const;
  std::string describe_buffer(std::uint32_t b) const;
  std::uint32_t default_warps() const;
  std::uint64_t seen_operations_ = 0;

  struct entry {
    checkpoint_buffer buffer;
    std::string name;
    detail::array_base* array = nullptr;
  };
  std::vector<entry> buffers_;
  std::string path_;
  options opts_;
  checkpoint_options copts_;
  std::shared_ptr<controller> controller_;
  runtime::device_ptr<checkpoint_buffer> device_buffers_;
  runtime::device_ptr<checkpoint_control> control_;
  runtime::device_ptr<std::byte> record_io_;
  runtime::device_ptr<std::byte> scratch_;
  runtime::device_ptr<std::uint32_t> scratch_locks_;
  checkpoint_ref ref_{};
};

namespace detail {
// Per target (src/durable/checkpoint_run.cpp, built for the GPU by
// checkpoint_run.cu): runs `op` (0 scan, 1 checkpoint, 2 restore) on `warps`
// warps (run_warps: the CPU target clamps them to cpu_warps()) and waits.
void run_checkpoint_op(const checkpoint_ref& ref, int op, std::uint32_t warps);
// Lanes of a warp on the target (32 on the GPU, 1 on the CPU).
std::uint32_t checkpoint_warp_size();
// Warps the host forms use for `chunks` chunks.
std::uint32_t checkpoint_default_warps(std::uint64_t chunks);
}  // namespace detail

}  // namespace warpstore
