#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "controller/host_controller.h"
#include "controller/memory_controller.h"
#include "controller/nvme_controller.h"
#include "controller/nvme_target.h"
#include "controller/residency.h"
#include "warpstore/controller.h"

namespace warpstore {

namespace {

// controller=auto: the memory controller over the page cache for a
// read-only regular file of at most mapped_max_bytes (0: an eighth of the
// machine's memory) with at least 90 % of its pages in memory now
// (sampled); the host controller for anything else (writable, O_DIRECT asked for, too large,
// mostly on disk, not a regular file).
controller_kind choose(const std::string& path, const options& opts) {
  if (opts.writable || opts.direct == direct_io::on) return controller_kind::host;
  std::uint64_t limit = opts.mapped_max_bytes;
  if (limit == 0) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return controller_kind::host;
    limit = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 8;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return controller_kind::host;  // the host controller's open reports why
  struct stat st {};
  const bool fits = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
                    static_cast<std::uint64_t>(st.st_size) <= limit;
  const bool resident =
      fits && detail::sample_resident_share(fd, static_cast<std::uint64_t>(st.st_size)) >= 0.9;
  ::close(fd);
  return resident ? controller_kind::memory : controller_kind::host;
}

}  // namespace

std::shared_ptr<controller> make_controller(const std::string& path, const options& opts) {
  opts.validate();
  // An nvme:// path names a device, never a file: only the nvme controller
  // (asked for, or picked by auto) takes it, and it takes nothing else.
  if (nvme_target::names_device(path)) {
    if (opts.controller != controller_kind::nvme && opts.controller != controller_kind::automatic)
      throw invalid_argument("'" + path + "' names an NVMe device, which only controller=nvme "
                             "(or auto) drives, not controller=" + to_string(opts.controller),
                             path);
    return std::make_shared<nvme_controller>(nvme_target::parse(path), opts, opts.line_size);
  }
  if (opts.controller == controller_kind::nvme)
    throw invalid_argument("controller=nvme drives an NVMe device through VFIO, named "
                           "nvme://<PCI address>[/ns<N>] (e.g. nvme://0000:65:00.0); '" + path +
                           "' is not such a path (for a file, use controller=nvme-model, host, "
                           "memory or auto)",
                           path);
  const file_access access = opts.writable ? file_access::read_write : file_access::read_only;
  const controller_kind kind =
      opts.controller == controller_kind::automatic ? choose(path, opts) : opts.controller;
  if (kind == controller_kind::memory) {
    auto file = std::make_shared<backing_file>(path, direct_io::off, access);
    return std::make_shared<memory_controller>(file, std::max(4u, opts.service_threads),
                                               opts.write_behind_bytes, /*map=*/true,
                                               opts.memory_fill_together);
  }
  if (kind == controller_kind::nvme_model) {
    auto file = std::make_shared<backing_file>(path, direct_io::off, access);
    return std::make_shared<nvme_controller>(file, opts, opts.line_size);
  }
  auto file = std::make_shared<backing_file>(path, opts.direct, access);
  return std::make_shared<host_controller>(file, opts, opts.line_size);
}

}  // namespace warpstore
