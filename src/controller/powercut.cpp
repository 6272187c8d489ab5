#include "controller/powercut.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "warpstore/error.h"
#include "warpstore/runtime.h"

namespace warpstore {

namespace {

void pread_all(int fd, std::byte* dst, std::size_t bytes, std::uint64_t offset,
               const std::string& path) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, dst + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      throw runtime_error("power-cut layer: reading the pre-image at offset " +
                              std::to_string(offset + done) + " of '" + path +
                              "' failed: " + std::strerror(err),
                          file_info(path, err, offset + done));
    }
    if (n == 0) {  // past the end of the file: the block held nothing there
      std::memset(dst + done, 0, bytes - done);
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

void pwrite_all(int fd, const std::byte* src, std::size_t bytes, std::uint64_t offset,
                const std::string& path) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd, src + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      throw runtime_error("power-cut layer: restoring offset " + std::to_string(offset + done) +
                              " of '" + path + "' failed: " + std::strerror(err),
                          file_info(path, err, offset + done));
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

powercut_layer::powercut_layer(std::shared_ptr<backing_file> file) : file_(std::move(file)) {}

bool powercut_layer::covers(nvme::opcode op) const {
  (void)op;
  return true;
}

fault_action powercut_layer::before_execute(std::uint32_t, const nvme::command&) {
  fault_action a;
  if (off_.load(std::memory_order_acquire)) a.kind = fault_kind::io_error;
  return a;
}

void powercut_layer::write_starting(std::uint64_t offset, std::uint32_t bytes) {
  if (bytes == 0) return;
  const std::uint64_t first = offset / block;
  const std::uint64_t last = (offset + bytes - 1) / block;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::uint64_t b = first; b <= last; ++b) {
      version v;
      v.before.resize(block);
      // The buffered descriptor: O_DIRECT would need aligned buffers, and the
      // page cache is what the write is about to change.
      pread_all(file_->buffered_fd(), v.before.data(), block, b * block, file_->path());
      blocks_[b].push_back(std::move(v));
    }
  }
  if (on_write_) on_write_();
}

void powercut_layer::write_finished(std::uint64_t offset, std::uint32_t bytes) {
  if (bytes == 0) return;
  const std::uint64_t first = offset / block;
  const std::uint64_t last = (offset + bytes - 1) / block;
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint64_t t = ++clock_;
  for (std::uint64_t b = first; b <= last; ++b) {
    auto it = blocks_.find(b);
    if (it == blocks_.end()) continue;
    // The oldest version still in flight is this write's (writes of one
    // block that overlap in time have no order anyway).
    for (version& v : it->second)
      if (v.finished == 0) {
        v.finished = t;
        break;
      }
  }
}

std::uint64_t powercut_layer::flush_starting() {
  std::lock_guard<std::mutex> lock(mutex_);
  return ++clock_;
}

bool powercut_layer::flush_finished(std::uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (off_.load(std::memory_order_acquire)) return false;
  // Every write that finished before the flush started is durable: for each
  // block, the versions up to the newest such write go; the pre-image of
  // the next one (the content that write left) becomes the durable state.
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    std::vector<version>& vs = it->second;
    std::size_t durable = 0;  // versions [0, durable) are overwritten durably
    for (std::size_t i = 0; i < vs.size(); ++i)
      if (vs[i].finished != 0 && vs[i].finished < ticket) durable = i + 1;
    if (durable == vs.size()) {
      it = blocks_.erase(it);
      continue;
    }
    vs.erase(vs.begin(), vs.begin() + static_cast<std::ptrdiff_t>(durable));
    ++it;
  }
  return true;
}

void powercut_layer::power_off() {
  std::lock_guard<std::mutex> lock(mutex_);
  off_.store(true, std::memory_order_release);
}

std::uint64_t powercut_layer::volatile_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocks_.size();
}

powercut_layer::cut_result powercut_layer::cut(std::uint64_t seed, double loss) {
  if (powered()) throw runtime_error("power-cut layer: cut() before power_off()");
  std::lock_guard<std::mutex> lock(mutex_);
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution lose(loss);
  cut_result r;
  for (auto& [b, vs] : blocks_) {
    ++r.volatile_blocks;
    if (!lose(rng)) continue;
    // Version i's pre-image is what the block held before write i: back to
    // the durable state (i = 0) or to the result of some later write.
    // loss = 1 loses every un-flushed write: back to the durable state.
    std::uniform_int_distribution<std::size_t> pick(0, loss >= 1 ? 0 : vs.size() - 1);
    const version& v = vs[pick(rng)];
    pwrite_all(file_->buffered_fd(), v.before.data(), block, b * block, file_->path());
    ++r.reverted;
  }
  blocks_.clear();
  return r;
}

}  // namespace warpstore
