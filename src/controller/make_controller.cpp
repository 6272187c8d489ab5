#include <algorithm>
#include <memory>

#include "controller/host_controller.h"
#include "controller/memory_controller.h"
#include "warpstore/controller.h"

namespace warpstore {

std::shared_ptr<controller> make_controller(const std::string& path, const options& opts) {
  opts.validate();
  const file_access access = opts.writable ? file_access::read_write : file_access::read_only;
  if (opts.controller == controller_kind::memory) {
    auto file = std::make_shared<backing_file>(path, direct_io::off, access);
    return std::make_shared<memory_controller>(file, std::max(4u, opts.service_threads),
                                               opts.write_behind_bytes);
  }
  auto file = std::make_shared<backing_file>(path, opts.direct, access);
  return std::make_shared<host_controller>(file, opts, opts.line_size);
}

}  // namespace warpstore
