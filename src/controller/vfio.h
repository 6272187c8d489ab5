// VFIO (type1) implementations of the NVMe driver core's two seams
// (nvme_driver.h): a PCI function opened through VFIO gives the `nvme_bar`
// (the mmap of its BAR0 region), and vfio_dma_memory gives the
// `dma_memory` (anonymous host memory mapped into the device's IOMMU
// domain with VFIO_IOMMU_MAP_DMA, iova() answered from its own table).
// Linux only.
//
// Order of lifetimes: the vfio_device outlives every vfio_dma_memory over
// its mapper, which outlives the nvme_driver that uses both:
//
//   vfio_device dev("0000:65:00.0");
//   vfio_dma_memory mem(dev.mapper());
//   nvme_driver drv(dev.bar(), mem, {.name = dev.name()});
//
// Errors: warpstore::runtime_error whose info() carries the PCI address as
// path and the errno of the failed call; the message names the step, the
// file or ioctl, the errno text and the fix. invalid_argument for a bad PCI
// address or a bad argument. No call here waits: every open is of a device
// node or a sysfs file, every ioctl returns (VFIO_DEVICE_RESET is bounded
// by the kernel's own reset timeouts).
//
// The `nvme` controller (nvme_controller.h) opens devices through this;
// none of it has run against a real kernel's VFIO or a real device.
//
// Not here: GPU memory as a PRP target (a dma-buf cannot be mapped through type1), iommufd,
// interrupts (the driver polls), and the IOMMU's valid IOVA ranges
// (VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE): the default IOVA window,
// [4 GiB, 512 GiB), lies inside the 39-bit address width every VT-d and
// AMD-Vi unit offers and clear of the x86 MSI window at 0xfee00000.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "controller/nvme_driver.h"

namespace warpstore {

// A PCI function: domain:bus:device.function.
struct pci_address {
  std::uint16_t domain = 0;
  std::uint8_t bus = 0;
  std::uint8_t device = 0;    // 0..0x1f
  std::uint8_t function = 0;  // 0..7

  // "0000:65:00.0", "nvme://0000:65:00.0", or without the domain
  // ("65:00.0", domain 0000), as `warpstore nvme doctor` takes them; hex
  // digits of either case, exact widths (4:2:2.1), nothing else around.
  // Raises invalid_argument naming the text and the form expected.
  static pci_address parse(std::string_view text);
  // "0000:65:00.0": lower case, as sysfs and VFIO name it.
  std::string text() const;
  friend bool operator==(const pci_address&, const pci_address&) = default;
};

// Maps process memory into a device's IOMMU domain. The real one
// (vfio_device::mapper()) does VFIO_IOMMU_MAP_DMA / VFIO_IOMMU_UNMAP_DMA on
// the container; tests put a recording fake here. Both raise on failure.
class iommu_mapper {
 public:
  virtual ~iommu_mapper() = default;
  // Device reads and writes of [iova, iova + bytes) reach [vaddr, vaddr + bytes).
  virtual void map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t bytes) = 0;
  // Undoes one map() exactly (same iova and bytes).
  virtual void unmap(std::uint64_t iova, std::uint64_t bytes) = 0;
};

// How vfio_dma_memory picks IOVAs.
enum class iova_policy {
  allocate,  // from its own window, [iova_base, iova_limit)
  identity,  // iova == virtual address: for a device that expects that (the
             // software model, through a passthrough mapper), never for VFIO
};

struct vfio_dma_options {
  iova_policy policy = iova_policy::allocate;
  std::uint64_t iova_base = 1ull << 32;   // nonzero: IOVA 0 is never handed out
  std::uint64_t iova_limit = 1ull << 39;  // exclusive
  // Names the device in messages and in info().path.
  std::string name = "vfio";
};

// dma_memory over an iommu_mapper. alloc() takes anonymous memory (mmap,
// whole 4 KiB pages, aligned to `align`: any power of two up to 1 GiB),
// which the kernel hands out zeroed, marks it MADV_DONTFORK (a child must not
// copy-on-write pages the device writes), takes an IOVA range aligned to
// max(align, 4 KiB) and maps it READ|WRITE. An IOVA range goes back to the
// free list only once unmapped, so it is never reused while mapped. If the
// map fails, the memory and the range are released before the error
// propagates. map_external() enters memory someone else allocated (pinned
// staging from cudaHostAlloc, say) into the same table.
//
// If an unmap fails (free() cannot raise), the memory and its IOVA range
// are kept, never reused, and counted in leaked_allocations(): the device
// may still reach them.
//
// Thread-safe: one mutex over the table and the IOVA allocator; the
// mapper is called outside it. The mapper must outlive this object, which
// unmaps and frees whatever is left when it goes.
class vfio_dma_memory final : public dma_memory {
 public:
  explicit vfio_dma_memory(iommu_mapper& mapper, vfio_dma_options options = {});
  ~vfio_dma_memory() override;
  vfio_dma_memory(const vfio_dma_memory&) = delete;
  vfio_dma_memory& operator=(const vfio_dma_memory&) = delete;

  void* alloc(std::size_t bytes, std::size_t align) override;
  // Raises invalid_argument for a pointer in no allocation or mapping.
  std::uint64_t iova(const void* p) const override;
  // Unmaps and frees an alloc()'d block; nullptr is ignored, anything else
  // not from alloc() is ignored too (a bug of the caller, not worth a crash
  // in a noexcept path). External mappings go through unmap_external().
  void free(void* p) noexcept override;

  // Maps [p, p + bytes) (p and bytes multiples of 4 KiB, not overlapping
  // anything in the table) and returns its IOVA; raises invalid_argument
  // otherwise, or what the mapper raises.
  std::uint64_t map_external(void* p, std::size_t bytes);
  // Unmaps a range map_external() mapped (p is its start); raises
  // invalid_argument for anything else, or what the mapper raises (the
  // range then stays in the table).
  void unmap_external(void* p);

  // Allocations and external mappings in the table now.
  std::size_t mappings() const;
  std::size_t leaked_allocations() const;
  const vfio_dma_options& options() const { return options_; }

 private:
  struct entry {
    std::size_t bytes = 0;  // mapped bytes (whole pages)
    std::uint64_t iova = 0;
    bool external = false;
  };

  std::uint64_t reserve_iova(std::uint64_t bytes, std::uint64_t align);  // locked
  void release_iova(std::uint64_t iova, std::uint64_t bytes);            // locked
  // Enters [base, base + bytes) into the table, maps it and returns its IOVA;
  // on failure leaves no trace of it (the caller frees the memory).
  std::uint64_t map_range(std::uintptr_t base, std::size_t bytes, std::size_t align, bool external);
  std::string prefix() const;

  iommu_mapper& mapper_;
  vfio_dma_options options_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, entry> table_;             // by virtual address, mapped or being mapped
  std::map<std::uint64_t, std::uint64_t> free_iova_;  // start -> bytes, coalesced
  std::size_t leaked_ = 0;
};

// Where the device nodes and sysfs are: a fake tree in tests.
struct vfio_paths {
  std::string sysfs = "/sys";
  std::string dev = "/dev";
};

struct vfio_device_options {
  vfio_paths paths;
  bool reset_on_open = false;  // a function-level reset, where the device has one
};

// A PCI function opened through VFIO type1 (see the top of this file): the
// container, its group and the device, BAR0 mapped, bus mastering on. The
// constructor checks, in order: the address, the device in sysfs, its
// driver (vfio-pci), its IOMMU group, /dev/vfio/vfio, the API version,
// type1 (v2 preferred), /dev/vfio/N, the group viable, the container, the
// IOMMU type, the device fd, BAR0 (mmap-able, big enough for the admin
// doorbells and one I/O queue pair's at CAP.DSTRD); and raises at the first
// that fails, with what was opened closed again. The destructor unmaps BAR0
// and closes the device, group and container fds, in that order.
class vfio_device {
 public:
  explicit vfio_device(std::string_view address, vfio_device_options options = {});
  ~vfio_device();
  vfio_device(const vfio_device&) = delete;
  vfio_device& operator=(const vfio_device&) = delete;

  const pci_address& address() const { return address_; }
  std::string name() const { return address_.text(); }
  unsigned group() const { return group_; }
  bool type1v2() const { return type1v2_; }
  nvme_bar bar() const { return {bar_, bar_bytes_}; }
  iommu_mapper& mapper();

  // Whether the device offers VFIO_DEVICE_RESET (VFIO_DEVICE_FLAGS_RESET).
  bool can_reset() const { return can_reset_; }
  // A function-level reset (VFIO_DEVICE_RESET), then bus mastering on again
  // (the reset clears the command register). Raises if the device has none.
  // Only with no driver over bar() and no DMA in flight.
  void reset();
  // PCI_COMMAND |= MEMORY | MASTER | INTX_DISABLE (the driver polls),
  // through the config region. The constructor does this.
  void enable_bus_master();
  std::uint16_t pci_command() const;  // the command register now

 private:
  class container_mapper;
  [[noreturn]] void fail(const std::string& step, int err, const std::string& fix) const;
  void open_sysfs();
  void open_container();
  void open_device();
  void map_bar0();
  void close_all() noexcept;

  pci_address address_;
  vfio_device_options options_;
  unsigned group_ = 0;
  bool type1v2_ = false;
  bool can_reset_ = false;
  int container_ = -1;
  int group_fd_ = -1;
  int device_ = -1;
  std::uint64_t config_offset_ = 0;  // of the config region in the device fd
  std::byte* bar_ = nullptr;
  std::size_t bar_bytes_ = 0;
  std::unique_ptr<container_mapper> mapper_;
};

}  // namespace warpstore
