// The GPU target: a call's resources, its launch on the caller's stream
// (the kernels: gather_kernels.cuh, one unit per word size) and the
// interruptible wait. 1-D gathers run one thread per element; row gathers
// one warp per row.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "gather.cuh"
#include "gather.h"
#include "warpstore/cuda_check.h"

namespace warpstore::python {

// gather_kernels.cuh, instantiated per word size (gather_word.cu.in).
template <class W>
void launch_word(const erased_array& ea, const void* idx, std::uint32_t index_bytes,
                 std::uint64_t n, void* out, cudaStream_t s, call_slot& slot);

bool target_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

call_slot make_call_slot() {
  call_slot s;
  try {
    s.device = static_cast<call_record*>(runtime::alloc_device(sizeof(call_record)));
    s.host = static_cast<call_record*>(runtime::alloc_host_mapped(sizeof(call_record)));
    // The record the first call starts from (each kernel's last block
    // leaves it so for the next).
    const call_record fresh = fresh_call_record();
    WARPSTORE_CUDA_TRY(cudaMemcpy(s.device, &fresh, sizeof fresh, cudaMemcpyHostToDevice));
    cudaEvent_t ev = nullptr;
    WARPSTORE_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    s.event = ev;
    cudaStream_t cs = nullptr;
    WARPSTORE_CUDA_TRY(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    s.cancel_stream = cs;
  } catch (...) {
    destroy_call_slot(s);
    throw;
  }
  return s;
}

void destroy_call_slot(call_slot& s) noexcept {
  if (s.cancel_stream != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(s.cancel_stream));
    cudaStreamDestroy(static_cast<cudaStream_t>(s.cancel_stream));
  }
  if (s.event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(s.event));
  if (s.sort_space != nullptr) cudaFree(s.sort_space);
  runtime::free_host_mapped(s.host);
  runtime::free_device(s.device);
  s = call_slot{};
}

namespace {

// Waits for `ev` without blocking in the driver, so the caller can be asked
// every poll_period whether to cancel: spins (yielding) for the first
// milliseconds, as a synchronize would, then sleeps in short steps. Returns
// whether it asked the gather to stop.
bool wait_interruptibly(cudaEvent_t ev, const call_slot& slot, const interrupt_poll& poll,
                        const late_hook& late) {
  using clock = std::chrono::steady_clock;
  constexpr auto poll_period = std::chrono::milliseconds(20);
  // The first half millisecond polls without giving the core away: a
  // small gather ends within it, and a yield there hands the core to any
  // runnable thread for a whole timeslice (a torch pool's threads spin
  // after their parallel region), which turned 50 us gathers into
  // milliseconds now and then. Then yields until 2 ms, then sleeps.
  constexpr auto busy_for = std::chrono::microseconds(500);
  constexpr auto spin_for = std::chrono::milliseconds(2);
  const auto start = clock::now();
  auto next_poll = start + poll_period;
  bool asked = false, late_called = !late;
  for (;;) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return asked;
    if (e != cudaErrorNotReady) WARPSTORE_CUDA_TRY(e);
    const auto now = clock::now();
    if (!late_called)
      late_called = late(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count()));
    if (now - start >= spin_for)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else if (now - start >= busy_for)
      std::this_thread::yield();
    if (!asked && poll && now >= next_poll) {
      next_poll = now + poll_period;
      if (poll()) {
        asked = true;
        // The caller's stream is busy with the gather: the flag goes through
        // a stream of its own, which runs beside it.
        const auto cs = static_cast<cudaStream_t>(slot.cancel_stream);
        WARPSTORE_CUDA_TRY(cudaMemsetAsync(&slot.device->cancel, 1, 1, cs));
      }
    }
  }
}

}  // namespace

void launch_gather(const erased_array& a, const void* idx, std::uint32_t index_bytes,
                   std::uint64_t n, void* out, std::uintptr_t stream, call_slot& slot,
                   const interrupt_poll&, done_hook on_done, bool& queued) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  // The device record is fresh: the slot's last kernel (or make_call_slot)
  // left it so, and its last block hands this call's record to slot.host.
  with_word(a.word_bytes(),
            [&]<class W>() { launch_word<W>(a, idx, index_bytes, n, out, s, slot); });
  // Before the event: a waiter that saw the event knows the hook has run.
  // No hook (nothing to announce): no host callback holding up the stream.
  if (on_done.fn != nullptr) WARPSTORE_CUDA_TRY(cudaLaunchHostFunc(s, on_done.fn, on_done.arg));
  queued = true;
  WARPSTORE_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(slot.event), s));
}

void wait_gather(const call_slot& slot, const interrupt_poll& poll, const late_hook& late) {
  if (!wait_interruptibly(static_cast<cudaEvent_t>(slot.event), slot, poll, late)) return;
  // A cancel may land after the kernel's last block reset the record (the
  // gather then ran whole, and slot.host says so): it must not cancel the
  // slot's next call.
  const auto cs = static_cast<cudaStream_t>(slot.cancel_stream);
  WARPSTORE_CUDA_TRY(cudaMemsetAsync(&slot.device->cancel, 0, sizeof slot.device->cancel, cs));
  WARPSTORE_CUDA_TRY(cudaStreamSynchronize(cs));
}

bool gather_done(const call_slot& slot) {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(slot.event));
  if (e == cudaErrorNotReady) return false;
  if (e != cudaSuccess) WARPSTORE_CUDA_TRY(e);
  return true;
}

}  // namespace warpstore::python

namespace warpstore::python {
int current_device() {
  int d = 0;
  WARPSTORE_CUDA_TRY(cudaGetDevice(&d));
  return d;
}
}  // namespace warpstore::python

namespace warpstore::python {

namespace {
// The UVA ceiling of the gather benchmark: one warp per row reads the row
// straight from pinned host memory over PCIe (no cache, no queues).
__global__ void uva_gather_kernel(const std::byte* src, std::uint64_t row_bytes,
                                  const std::int64_t* idx, std::uint64_t n, std::byte* out) {
  const std::uint64_t warps = gridDim.x * std::uint64_t{blockDim.x} / 32;
  for (std::uint64_t k = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32; k < n;
       k += warps)
    detail::cooperative_copy(detail::warp::active_mask(), out + k * row_bytes,
                             src + static_cast<std::uint64_t>(idx[k]) * row_bytes,
                             static_cast<std::uint32_t>(row_bytes));
}
}  // namespace

void uva_gather(const void* host_src, std::uint64_t row_bytes, const std::int64_t* idx,
                std::uint64_t n, void* out, std::uintptr_t stream) {
  if (row_bytes % 16 != 0 || reinterpret_cast<std::uintptr_t>(host_src) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(out) % 16 != 0)
    throw warpstore::invalid_argument("uva_gather: rows and buffers must be 16-byte aligned");
  void* src = nullptr;
  WARPSTORE_CUDA_TRY(cudaHostGetDevicePointer(&src, const_cast<void*>(host_src), 0));
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const std::uint64_t blocks = std::min<std::uint64_t>((n + 7) / 8, 1u << 20);
  if (n == 0) return;
  uva_gather_kernel<<<static_cast<unsigned>(blocks), 8 * 32, 0, s>>>(  // 8 warps a block
      static_cast<const std::byte*>(src), row_bytes, idx, n, static_cast<std::byte*>(out));
  WARPSTORE_CHECK_LAUNCH();
  WARPSTORE_CUDA_TRY(cudaStreamSynchronize(s));
}

}  // namespace warpstore::python
