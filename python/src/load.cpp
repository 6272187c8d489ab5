// warpstore load (load.h), one source for both targets: load.cu builds it
// with nvcc so run_warps launches kernels; the CPU target runs the same
// bodies on threads.
#include "load.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>

#include "warpstore/array.cuh"
#include "warpstore/launch.cuh"
#include "warpstore/runtime.h"

namespace warpstore::python {

namespace {

// Copies the chunk [first, first + bytes) of the array between `host` (its
// bytes, host-mapped so the GPU reaches them) and the array: each warp takes
// whole lines of the array (the chunk starts on a line), striding by the
// warps of the launch, so a write covers its lines whole and reads nothing
// first; only the chunk's last line may be partial.
template <bool Write>
struct copy_chunk {
  array_ref<std::byte> ref;
  std::byte* host;
  std::uint64_t first;
  std::uint64_t bytes;
  std::uint64_t line;

  WARPSTORE_HD void operator()(std::uint64_t w, std::uint64_t n) const {
    const std::uint64_t lines = (bytes + line - 1) / line;
    for (std::uint64_t k = w; k < lines; k += n) {
      const std::uint64_t lo = k * line;
      const std::uint64_t take = bytes - lo < line ? bytes - lo : line;
      if constexpr (Write)
        ref.write_span(first + lo, take, host + lo);
      else
        ref.read_span(first + lo, take, host + lo);
    }
  }
};

// Warps for a chunk of `lines` lines: one a line, no more than the cache
// holds lines (a warp holds at most one at a time, so they never wait on
// each other for room).
std::uint64_t warps_for(std::uint64_t lines, const array_ref<std::byte>& ref) {
  return std::max<std::uint64_t>(1, std::min<std::uint64_t>(lines, ref.cache.num_lines));
}

// Reads bytes [at, at + n) of `fd` into `out`, all of them.
void read_source(int fd, const std::string& path, std::uint64_t at, std::byte* out,
                 std::uint64_t n) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw file_error(errno, path + ": read failed", path, at);
    if (got == 0)
      throw file_error(EIO, path + ": the file ended at byte " + std::to_string(at) +
                                " while it was read (it shrank)",
                       path, at);
    out += got;
    at += static_cast<std::uint64_t>(got);
    n -= static_cast<std::uint64_t>(got);
  }
}

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Calls step(first, n) for each chunk of [0, bytes), `chunk` bytes each but
// the last, while step returns true; Ctrl-C (poll) ends it between chunks.
template <class Step>
void for_each_chunk(std::uint64_t bytes, std::uint64_t chunk, const interrupt_poll& poll,
                    Step&& step) {
  for (std::uint64_t first = 0; first < bytes; first += chunk) {
    if (poll && poll()) throw cancelled();
    if (!step(first, std::min(chunk, bytes - first))) return;
  }
}

}  // namespace

load_result load_file(const std::string& src, const std::string& dst, std::uint64_t offset,
                      options opts, std::uint64_t chunk_bytes, const interrupt_poll& poll) {
  const fd_closer in{::open(src.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) throw file_error(errno, src + ": cannot open the source", src);
  const off_t end = ::lseek(in.fd, 0, SEEK_END);
  if (end < 0) throw file_error(errno, src + ": cannot find the source's size", src);
  const auto bytes = static_cast<std::uint64_t>(end);
  if (bytes == 0) throw invalid_argument(src + ": the source is empty: nothing to load", src);
  if (offset % nvme::block_size != 0)
    throw invalid_argument(dst + ": offset " + std::to_string(offset) +
                               " is not a multiple of the " + std::to_string(nvme::block_size) +
                               "-byte block size",
                           dst, offset);

  load_result r;
  r.bytes = bytes;
  opts.writable = true;
  opts.validate();
  {
    // The destination's size is checked on its controller before any array
    // exists over it, so a source that does not fit writes nothing.
    std::shared_ptr<controller> ctl = make_controller(dst, opts);
    const std::uint64_t capacity = ctl->file().size_bytes();
    if (offset > capacity || bytes > capacity - offset)
      throw invalid_argument(dst + ": " + std::to_string(bytes) + " bytes of " + src +
                                 " at offset " + std::to_string(offset) +
                                 " do not fit: the destination holds " +
                                 std::to_string(capacity) + " bytes",
                             dst, offset);
    array<std::byte> a(std::make_shared<warpstore::cache>(opts), std::move(ctl), bytes, offset,
                       opts);
    // Timed from here: opening a device (an nvme bring-up) is not the copy.
    const auto started = std::chrono::steady_clock::now();
    const array_ref<std::byte> ref = a.ref();
    const std::uint64_t line = a.cache().line_size();
    // The service threads poll at full speed while the copy runs: asleep,
    // each command would wait milliseconds for one to wake.
    const activity_scope awake(*a.shared_controller());
    // Whole lines a chunk, so every chunk but the last starts and ends on one.
    const std::uint64_t chunk = std::max(line, chunk_bytes / line * line);
    auto buffer = runtime::make_host_mapped<std::byte>(std::min(chunk, bytes), false);
    for_each_chunk(bytes, chunk, poll, [&](std::uint64_t first, std::uint64_t n) {
      read_source(in.fd, src, first, buffer.get(), n);
      run_warps(warps_for((n + line - 1) / line, ref),
                copy_chunk<true>{ref, buffer.get(), first, n, line});
      a.check();
      return true;
    });
    a.flush();
    r.write_seconds = seconds_since(started);
  }

  // A fresh read-only array with a cache of its own: every byte comes from
  // the device, none from the lines the writes left.
  opts.writable = false;
  array<std::byte> a(dst, bytes, opts, offset);
  const auto verify_started = std::chrono::steady_clock::now();
  const array_ref<std::byte> ref = a.ref();
  const std::uint64_t line = a.cache().line_size();
  const activity_scope awake(*a.shared_controller());
  const std::uint64_t chunk = std::max(line, chunk_bytes / line * line);
  auto device = runtime::make_host_mapped<std::byte>(std::min(chunk, bytes), false);
  auto expected = std::make_unique<std::byte[]>(std::min(chunk, bytes));
  for_each_chunk(bytes, chunk, poll, [&](std::uint64_t first, std::uint64_t n) {
    read_source(in.fd, src, first, expected.get(), n);
    run_warps(warps_for((n + line - 1) / line, ref),
              copy_chunk<false>{ref, device.get(), first, n, line});
    a.check();
    if (std::memcmp(device.get(), expected.get(), n) == 0) return true;
    const std::byte* got = std::mismatch(device.get(), device.get() + n, expected.get()).first;
    r.first_mismatch = first + static_cast<std::uint64_t>(got - device.get());
    return false;
  });
  r.verify_seconds = seconds_since(verify_started);
  return r;
}

}  // namespace warpstore::python
