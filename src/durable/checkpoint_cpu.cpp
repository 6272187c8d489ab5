// CPU target of the checkpoint host forms: std::threads play the warps (one
// lane each) of the device form.
#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

#include "warpstore/durable/checkpoint.cuh"

namespace warpstore::detail {

void run_checkpoint_op(const checkpoint_ref& ref, int op, std::uint32_t warps) {
  if (op == 0) {
    ref.scan();
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(warps);
  std::exception_ptr failure;
  try {
    for (std::uint32_t w = 0; w < warps; ++w)
      threads.emplace_back([&ref, op, w, warps] {
        if (op == 1) ref.checkpoint(w, warps);
        else ref.restore(w, warps);
      });
  } catch (...) {
    // A thread that could not start never arrives: the operation does not
    // finish, and the host sees it (finish() raises).
    failure = std::current_exception();
  }
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

std::uint32_t checkpoint_warp_size() { return 1; }

std::uint32_t checkpoint_default_warps(std::uint64_t chunks) {
  const std::uint64_t most = std::clamp(std::thread::hardware_concurrency(), 2u, 8u);
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(chunks, 1, most));
}

}  // namespace warpstore::detail
