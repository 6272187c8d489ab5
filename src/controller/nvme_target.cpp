#include "controller/nvme_target.h"

#include <cctype>
#include <string>

#include "warpstore/error.h"

namespace warpstore {

namespace {
constexpr std::string_view scheme = "nvme://";

bool starts_with_scheme(std::string_view path) {
  if (path.size() < scheme.size()) return false;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(path[i])) != scheme[i]) return false;
  return true;
}
}  // namespace

bool nvme_target::names_device(std::string_view path) { return starts_with_scheme(path); }

nvme_target nvme_target::parse(std::string_view path) {
  const std::string forms =
      "expected nvme://<PCI address>[/ns<N>], e.g. nvme://0000:65:00.0 (namespace 1) or "
      "nvme://0000:65:00.0/ns2";
  const std::string given(path);
  if (!starts_with_scheme(path))
    throw invalid_argument("'" + given + "' is not an NVMe device path: " + forms, given);
  std::string_view rest = path.substr(scheme.size());
  nvme_target t;
  const auto slash = rest.find('/');
  if (slash != std::string_view::npos) {
    const std::string_view ns = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    bool digits = ns.size() > 2 && ns.substr(0, 2) == "ns" && ns.size() <= 12 && ns[2] != '0';
    for (std::size_t i = 2; digits && i < ns.size(); ++i)
      digits = std::isdigit(static_cast<unsigned char>(ns[i])) != 0;
    const std::uint64_t nsid = digits ? std::stoull(std::string(ns.substr(2))) : 0;
    if (!digits || nsid == 0 || nsid > 0xFFFFFFFEull)
      throw invalid_argument("'" + given + "': the namespace must be /ns<N>, N a decimal NSID " +
                                 "from 1 to 4294967294 without leading zeros, got '/" +
                                 std::string(ns) + "'; " + forms,
                             given);
    t.nsid = static_cast<std::uint32_t>(nsid);
  }
  try {
    t.address = pci_address::parse(rest);
  } catch (const std::invalid_argument& e) {
    throw invalid_argument("'" + given + "': " + e.what() + "; " + forms, given);
  }
  return t;
}

std::string nvme_target::text() const {
  return std::string(scheme) + address.text() + "/ns" + std::to_string(nsid);
}

}  // namespace warpstore
