// What an `nvme://` path names: a PCI function driven through VFIO and one
// namespace of it. The forms:
//
//   nvme://0000:65:00.0        namespace 1
//   nvme://0000:65:00.0/ns2    namespace 2
//   nvme://65:00.0/ns2         domain 0000
//
// The address takes the forms pci_address::parse takes (vfio.h); the
// namespace is `/ns` and a decimal NSID from 1 to 0xFFFFFFFE (NVMe 1.4,
// section 6.1: 0 and 0xFFFFFFFF name no one namespace), no leading zeros.
// Nothing else may follow. An array over such a path addresses the
// namespace's raw blocks from LBA 0: there is no filesystem.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "controller/vfio.h"

namespace warpstore {

struct nvme_target {
  pci_address address;
  std::uint32_t nsid = 1;

  // Whether `path` is meant as a device: it starts with "nvme://" (any
  // case). make_controller routes such a path to the nvme controller and
  // refuses it for every other one, so a typo in the address is an error
  // and never a file name.
  static bool names_device(std::string_view path);
  // Raises invalid_argument naming the text and the forms above.
  static nvme_target parse(std::string_view path);
  // "nvme://0000:65:00.0/ns1": the canonical form, which arrays report as
  // their path.
  std::string text() const;
  friend bool operator==(const nvme_target&, const nvme_target&) = default;
};

}  // namespace warpstore
