// VFIO type1 for the NVMe driver core (vfio.h): PCI addresses, the DMA
// memory and its IOVA allocator, and the device (container, group, device
// fd, BAR0, bus mastering, reset).
#include "controller/vfio.h"

#include <fcntl.h>
#include <linux/pci_regs.h>
#include <linux/vfio.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "controller/nvme_driver_impl.h"
#include "warpstore/error.h"

namespace warpstore {
namespace {

// The driver core's page (the unit of its PRPs and of IOMMU mappings) and
// the text helpers of its messages.
using detail::nvme_driver_impl::hex;
using detail::nvme_driver_impl::page;
using detail::nvme_driver_impl::round_up;

constexpr std::uint64_t max_align = 1ull << 30;
// What the doctor tells a user to run; every "what to do" points there.
constexpr const char* doctor = "see `warpstore nvme doctor` and docs/NVME.md";

std::string errno_text(int err) {
  return std::system_category().message(err);
}

// What a failed step knows: the device's name as path, the errno (0: none).
error_info vfio_info(const std::string& name, int err = 0) {
  error_info i;
  i.kind = error_kind::runtime;
  i.path = name;
  i.sys_errno = err;
  return i;
}

// The last component of the link at `path`, or nullopt (errno set).
std::optional<std::string> link_target_name(const std::string& path) {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size() - 1);
  if (n < 0) return std::nullopt;
  std::string target(buf.data(), static_cast<std::size_t>(n));
  const auto slash = target.rfind('/');
  return slash == std::string::npos ? target : target.substr(slash + 1);
}

// `width` hex digits of `s` from `at`, or nullopt.
std::optional<unsigned> hex_field(std::string_view s, std::size_t at, std::size_t width) {
  if (at + width > s.size()) return std::nullopt;
  unsigned v = 0;
  for (std::size_t i = at; i < at + width; ++i) {
    const char c = s[i];
    unsigned d;
    if (c >= '0' && c <= '9')
      d = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = static_cast<unsigned>(c - 'A' + 10);
    else
      return std::nullopt;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

// ---- pci_address ---------------------------------------------------------------

pci_address pci_address::parse(std::string_view text) {
  auto bad = [&](const std::string& why) -> invalid_argument {
    std::string m = "PCI address '";
    m += text;
    m += "': ";
    m += why;
    m += "; expected domain:bus:device.function in hex, like 0000:65:00.0 (or nvme://0000:65:00.0)";
    return invalid_argument(m, std::string(text));
  };
  std::string_view s = text;
  if (s.substr(0, 7) == "nvme://") s.remove_prefix(7);
  std::size_t at = 0;
  pci_address a;
  if (s.size() == 12) {  // DDDD:BB:DD.F
    const auto d = hex_field(s, 0, 4);
    if (!d || s[4] != ':') throw bad("the domain is not 4 hex digits followed by ':'");
    a.domain = static_cast<std::uint16_t>(*d);
    at = 5;
  } else if (s.size() != 7) {  // BB:DD.F
    throw bad(s.empty() ? "empty" : "wrong length");
  }
  const auto bus = hex_field(s, at, 2);
  if (!bus || s[at + 2] != ':') throw bad("the bus is not 2 hex digits followed by ':'");
  const auto dev = hex_field(s, at + 3, 2);
  if (!dev || s[at + 5] != '.') throw bad("the device is not 2 hex digits followed by '.'");
  if (*dev > 0x1f) throw bad("the device number is over 0x1f");
  const auto fn = hex_field(s, at + 6, 1);
  if (!fn) throw bad("the function is not a hex digit");
  if (*fn > 7) throw bad("the function number is over 7");
  a.bus = static_cast<std::uint8_t>(*bus);
  a.device = static_cast<std::uint8_t>(*dev);
  a.function = static_cast<std::uint8_t>(*fn);
  return a;
}

std::string pci_address::text() const {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain, bus, device, function);
  return buf;
}

// ---- vfio_dma_memory -----------------------------------------------------------

vfio_dma_memory::vfio_dma_memory(iommu_mapper& mapper, vfio_dma_options options)
    : mapper_(mapper), options_(std::move(options)) {
  if (options_.policy == iova_policy::allocate) {
    if (options_.iova_base == 0 || options_.iova_base % page != 0 ||
        options_.iova_limit % page != 0 || options_.iova_limit <= options_.iova_base)
      throw invalid_argument(prefix() + "the IOVA window [" + hex(options_.iova_base) + ", " +
                                 hex(options_.iova_limit) +
                                 ") must be nonempty, start above 0 and be page aligned",
                             options_.name);
    free_iova_.emplace(options_.iova_base, options_.iova_limit - options_.iova_base);
  }
}

vfio_dma_memory::~vfio_dma_memory() {
  // No other thread may use the object now; whatever is left goes.
  for (const auto& [base, e] : table_) {
    try {
      mapper_.unmap(e.iova, e.bytes);
    } catch (...) {
      continue;  // the device may still reach it: keep the memory
    }
    if (!e.external) ::munmap(reinterpret_cast<void*>(base), e.bytes);
  }
}

std::string vfio_dma_memory::prefix() const {
  return "vfio " + options_.name + ": DMA memory: ";
}

std::uint64_t vfio_dma_memory::reserve_iova(std::uint64_t bytes, std::uint64_t align) {
  for (auto it = free_iova_.begin(); it != free_iova_.end(); ++it) {
    const std::uint64_t start = it->first, end = it->first + it->second;
    const std::uint64_t a = round_up(start, align);
    if (a < start || a >= end || end - a < bytes) continue;
    free_iova_.erase(it);
    if (a > start) free_iova_.emplace(start, a - start);
    if (a + bytes < end) free_iova_.emplace(a + bytes, end - (a + bytes));
    return a;
  }
  throw runtime_error(prefix() + "no free IOVA range of " + std::to_string(bytes) +
                          " bytes aligned to " + hex(align) + " in [" + hex(options_.iova_base) +
                          ", " + hex(options_.iova_limit) + ")",
                      vfio_info(options_.name));
}

void vfio_dma_memory::release_iova(std::uint64_t iova, std::uint64_t bytes) {
  auto [it, inserted] = free_iova_.emplace(iova, bytes);
  if (!inserted) return;  // cannot happen: ranges are handed out once
  auto next = std::next(it);
  if (next != free_iova_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_iova_.erase(next);
  }
  if (it != free_iova_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_iova_.erase(it);
    }
  }
}

std::uint64_t vfio_dma_memory::map_range(std::uintptr_t base, std::size_t bytes, std::size_t align,
                                         bool external) {
  std::uint64_t iova;
  {
    std::lock_guard lock(mutex_);
    auto after = table_.lower_bound(base + bytes);
    if (after != table_.begin()) {
      const auto& [b, e] = *std::prev(after);
      if (b + e.bytes > base)
        throw invalid_argument(prefix() + "[" + hex(base) + ", " + hex(base + bytes) +
                                   ") overlaps memory already mapped at " + hex(b),
                               options_.name);
    }
    iova = options_.policy == iova_policy::identity ? base : reserve_iova(bytes, align);
    table_.emplace(base, entry{bytes, iova, external});
  }
  try {
    mapper_.map(base, iova, bytes);
  } catch (...) {
    std::lock_guard lock(mutex_);
    table_.erase(base);
    if (options_.policy == iova_policy::allocate) release_iova(iova, bytes);
    throw;
  }
  return iova;
}

void* vfio_dma_memory::alloc(std::size_t bytes, std::size_t align) {
  if (align == 0) align = 1;
  if (!std::has_single_bit(align) || align > max_align)
    throw invalid_argument(
        prefix() + "alignment " + std::to_string(align) + " is not a power of two up to 1 GiB",
        options_.name);
  const std::size_t a = std::max<std::size_t>(align, page);
  const std::size_t n = round_up(std::max<std::size_t>(bytes, 1), page);
  // mmap gives page alignment; a - page more bytes hold an `a`-aligned block.
  const std::size_t span = n + (a - page);
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    const int err = errno;
    throw runtime_error(prefix() + "mmap of " + std::to_string(span) +
                            " bytes of anonymous memory: " + errno_text(err),
                        vfio_info(options_.name, err));
  }
  const auto r = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t base = round_up(r, a);
  if (base > r) ::munmap(raw, base - r);
  if (r + span > base + n) ::munmap(reinterpret_cast<void*>(base + n), r + span - (base + n));
  void* p = reinterpret_cast<void*>(base);
  // Anonymous pages are zero-filled by the kernel; a forked child must not
  // take copy-on-write copies of pages the device writes.
  if (::madvise(p, n, MADV_DONTFORK) != 0) {
    const int err = errno;
    ::munmap(p, n);
    throw runtime_error(
        prefix() + "madvise(MADV_DONTFORK) of " + std::to_string(n) + " bytes: " + errno_text(err),
        vfio_info(options_.name, err));
  }
  try {
    map_range(base, n, a, false);
  } catch (...) {
    ::munmap(p, n);
    throw;
  }
  return p;
}

std::uint64_t vfio_dma_memory::iova(const void* p) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mutex_);
  auto it = table_.upper_bound(addr);
  if (it != table_.begin()) {
    --it;
    if (addr < it->first + it->second.bytes) return it->second.iova + (addr - it->first);
  }
  throw invalid_argument(
      prefix() + "iova() of " + hex(addr) + ", which lies in no DMA allocation or mapping",
      options_.name);
}

void vfio_dma_memory::free(void* p) noexcept {
  if (p == nullptr) return;
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  entry e;
  {
    std::lock_guard lock(mutex_);
    auto it = table_.find(base);
    if (it == table_.end() || it->second.external) return;
    e = it->second;
    table_.erase(it);
  }
  try {
    mapper_.unmap(e.iova, e.bytes);
  } catch (...) {
    std::lock_guard lock(mutex_);
    ++leaked_;
    return;
  }
  ::munmap(p, e.bytes);
  if (options_.policy == iova_policy::allocate) {
    std::lock_guard lock(mutex_);
    release_iova(e.iova, e.bytes);
  }
}

std::uint64_t vfio_dma_memory::map_external(void* p, std::size_t bytes) {
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  if (p == nullptr || base % page != 0 || bytes == 0 || bytes % page != 0)
    throw invalid_argument(prefix() + "map_external of " + std::to_string(bytes) + " bytes at " +
                               hex(base) +
                               ": the start and the length must be nonzero multiples of 4 KiB",
                           options_.name);
  return map_range(base, bytes, page, true);
}

void vfio_dma_memory::unmap_external(void* p) {
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  entry e;
  {
    std::lock_guard lock(mutex_);
    auto it = table_.find(base);
    if (it == table_.end() || !it->second.external)
      throw invalid_argument(prefix() + "unmap_external of " + hex(base) +
                                 ", which is not the start of an external mapping",
                             options_.name);
    e = it->second;
  }
  mapper_.unmap(e.iova, e.bytes);
  std::lock_guard lock(mutex_);
  table_.erase(base);
  if (options_.policy == iova_policy::allocate) release_iova(e.iova, e.bytes);
}

std::size_t vfio_dma_memory::mappings() const {
  std::lock_guard lock(mutex_);
  return table_.size();
}

std::size_t vfio_dma_memory::leaked_allocations() const {
  std::lock_guard lock(mutex_);
  return leaked_;
}

// ---- vfio_device ---------------------------------------------------------------

// VFIO_IOMMU_MAP_DMA / VFIO_IOMMU_UNMAP_DMA on the container.
class vfio_device::container_mapper final : public iommu_mapper {
 public:
  container_mapper(int container, std::string name)
      : container_(container), name_(std::move(name)) {}

  void map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t bytes) override {
    vfio_iommu_type1_dma_map m{};
    m.argsz = sizeof m;
    m.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
    m.vaddr = vaddr;
    m.iova = iova;
    m.size = bytes;
    if (::ioctl(container_, VFIO_IOMMU_MAP_DMA, &m) == 0) return;
    const int err = errno;
    std::string fix;
    if (err == ENOMEM)
      fix =
          "pinned memory counts against RLIMIT_MEMLOCK: raise it (`ulimit -l unlimited`, "
          "LimitMEMLOCK= for a systemd unit), " +
          std::string(doctor);
    else if (err == EEXIST)
      fix = "the IOVA range overlaps a mapping made elsewhere in this container";
    else if (err == ENOSPC)
      fix = "too many mappings: the vfio_iommu_type1 module caps them (dma_entry_limit)";
    else
      fix = doctor;
    raise("VFIO_IOMMU_MAP_DMA of " + std::to_string(bytes) + " bytes at " + hex(vaddr) +
              " to IOVA " + hex(iova),
          err, fix);
  }

  void unmap(std::uint64_t iova, std::uint64_t bytes) override {
    vfio_iommu_type1_dma_unmap u{};
    u.argsz = sizeof u;
    u.iova = iova;
    u.size = bytes;
    if (::ioctl(container_, VFIO_IOMMU_UNMAP_DMA, &u) != 0) {
      const int err = errno;
      raise("VFIO_IOMMU_UNMAP_DMA of " + std::to_string(bytes) + " bytes at IOVA " + hex(iova), err,
            "the range stays mapped");
    }
    if (u.size != bytes)
      raise("VFIO_IOMMU_UNMAP_DMA of " + std::to_string(bytes) + " bytes at IOVA " + hex(iova) +
                " unmapped " + std::to_string(u.size) + " bytes",
            0, "the IOVA table and the container disagree");
  }

 private:
  [[noreturn]] void raise(const std::string& what, int err, const std::string& fix) const {
    std::string m = "vfio " + name_ + ": " + what;
    if (err != 0) m += ": " + errno_text(err);
    m += "; " + fix;
    throw runtime_error(m, vfio_info(name_, err));
  }

  int container_;
  std::string name_;
};

vfio_device::vfio_device(std::string_view address, vfio_device_options options)
    : address_(pci_address::parse(address)), options_(std::move(options)) {
  try {
    open_sysfs();
    open_container();
    open_device();
    map_bar0();
    if (options_.reset_on_open && can_reset_)
      reset();
    else
      enable_bus_master();
    mapper_ = std::make_unique<container_mapper>(container_, name());
  } catch (...) {
    close_all();
    throw;
  }
}

vfio_device::~vfio_device() {
  close_all();
}

void vfio_device::close_all() noexcept {
  mapper_.reset();
  if (bar_ != nullptr) ::munmap(bar_, bar_bytes_);
  bar_ = nullptr;
  bar_bytes_ = 0;
  for (int* fd : {&device_, &group_fd_, &container_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

iommu_mapper& vfio_device::mapper() {
  return *mapper_;
}

void vfio_device::fail(const std::string& step, int err, const std::string& fix) const {
  std::string m = "vfio " + name() + ": " + step;
  if (err != 0) m += ": " + errno_text(err);
  m += "; " + fix;
  throw runtime_error(m, vfio_info(name(), err));
}

void vfio_device::open_sysfs() {
  const std::string dir = options_.paths.sysfs + "/bus/pci/devices/" + name();
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    fail("no such PCI device (stat " + dir + ")", err,
         "check the address with `lspci -D`; " + std::string(doctor));
  }
  const std::string group_link = dir + "/iommu_group";
  const auto group = link_target_name(group_link);
  if (!group) {
    const int err = errno;
    fail("no IOMMU group (readlink " + group_link + ")", err,
         "turn the IOMMU on (intel_iommu=on or amd_iommu=on on the kernel command line, VT-d / "
         "AMD-Vi in the firmware); " +
             std::string(doctor));
  }
  char* end = nullptr;
  const unsigned long g = std::strtoul(group->c_str(), &end, 10);
  if (group->empty() || *end != '\0')
    fail("the IOMMU group link " + group_link + " names '" + *group + "', not a number", 0, doctor);
  group_ = static_cast<unsigned>(g);
  const std::string driver_link = dir + "/driver";
  const auto driver = link_target_name(driver_link);
  if (!driver) {
    const int err = errno;
    fail("bound to no driver (readlink " + driver_link + ")", err,
         "bind it to vfio-pci: " + std::string(doctor));
  }
  if (*driver != "vfio-pci")
    fail("bound to " + *driver + ", not vfio-pci (" + driver_link + ")", 0,
         "bind it to vfio-pci (the kernel then loses the device and its filesystems): " +
             std::string(doctor));
}

void vfio_device::open_container() {
  const std::string container_path = options_.paths.dev + "/vfio/vfio";
  container_ = ::open(container_path.c_str(), O_RDWR | O_CLOEXEC);
  if (container_ < 0) {
    const int err = errno;
    fail("cannot open the VFIO container " + container_path, err,
         err == ENOENT ? "load vfio-pci (`modprobe vfio-pci`); " + std::string(doctor)
                       : "it needs read/write access; " + std::string(doctor));
  }
  const int version = ::ioctl(container_, VFIO_GET_API_VERSION);
  const int version_err = version < 0 ? errno : 0;
  if (version != VFIO_API_VERSION)
    fail("VFIO_GET_API_VERSION on " + container_path + " says " + std::to_string(version) +
             ", not " + std::to_string(VFIO_API_VERSION),
         version_err, "this kernel's VFIO is not the one warpstore speaks");
  if (::ioctl(container_, VFIO_CHECK_EXTENSION, static_cast<unsigned long>(VFIO_TYPE1v2_IOMMU)) > 0)
    type1v2_ = true;
  else if (::ioctl(container_, VFIO_CHECK_EXTENSION,
                   static_cast<unsigned long>(VFIO_TYPE1_IOMMU)) <= 0)
    fail("VFIO_CHECK_EXTENSION on " + container_path +
             ": neither VFIO_TYPE1v2_IOMMU nor VFIO_TYPE1_IOMMU is offered",
         0, "load vfio_iommu_type1 (`modprobe vfio_iommu_type1`); " + std::string(doctor));

  const std::string group_path = options_.paths.dev + "/vfio/" + std::to_string(group_);
  group_fd_ = ::open(group_path.c_str(), O_RDWR | O_CLOEXEC);
  if (group_fd_ < 0) {
    const int err = errno;
    std::string fix = doctor;
    if (err == ENOENT)
      fix = "bind every device of IOMMU group " + std::to_string(group_) + " to vfio-pci; " + fix;
    else if (err == EBUSY)
      fix = "another process (or another vfio_device here) holds the group";
    else if (err == EACCES || err == EPERM)
      fix = "it needs read/write access (root, chown, or a udev rule); " + fix;
    fail("cannot open the VFIO group " + group_path, err, fix);
  }
  vfio_group_status status{};
  status.argsz = sizeof status;
  if (::ioctl(group_fd_, VFIO_GROUP_GET_STATUS, &status) != 0) {
    const int err = errno;
    fail("VFIO_GROUP_GET_STATUS on " + group_path, err, doctor);
  }
  if ((status.flags & VFIO_GROUP_FLAGS_VIABLE) == 0)
    fail("IOMMU group " + std::to_string(group_) + " is not viable (VFIO_GROUP_GET_STATUS)", 0,
         "every device in " + options_.paths.sysfs + "/kernel/iommu_groups/" +
             std::to_string(group_) +
             "/devices must be bound to vfio-pci, pci-stub or no driver; " + std::string(doctor));
  if (::ioctl(group_fd_, VFIO_GROUP_SET_CONTAINER, &container_) != 0) {
    const int err = errno;
    fail("VFIO_GROUP_SET_CONTAINER of " + group_path, err, doctor);
  }
  if (::ioctl(container_, VFIO_SET_IOMMU,
              static_cast<unsigned long>(type1v2_ ? VFIO_TYPE1v2_IOMMU : VFIO_TYPE1_IOMMU)) != 0) {
    const int err = errno;
    fail(std::string("VFIO_SET_IOMMU ") + (type1v2_ ? "VFIO_TYPE1v2_IOMMU" : "VFIO_TYPE1_IOMMU"),
         err, doctor);
  }
}

void vfio_device::open_device() {
  const std::string bdf = name();
  device_ = ::ioctl(group_fd_, VFIO_GROUP_GET_DEVICE_FD, bdf.c_str());
  if (device_ < 0) {
    const int err = errno;
    device_ = -1;
    fail("VFIO_GROUP_GET_DEVICE_FD of group " + std::to_string(group_), err, doctor);
  }
  vfio_device_info info{};
  info.argsz = sizeof info;
  if (::ioctl(device_, VFIO_DEVICE_GET_INFO, &info) != 0) {
    const int err = errno;
    fail("VFIO_DEVICE_GET_INFO", err, doctor);
  }
  if ((info.flags & VFIO_DEVICE_FLAGS_PCI) == 0 || info.num_regions <= VFIO_PCI_CONFIG_REGION_INDEX)
    fail("VFIO_DEVICE_GET_INFO: not a PCI device with BAR and config regions", 0, doctor);
  can_reset_ = (info.flags & VFIO_DEVICE_FLAGS_RESET) != 0;
  vfio_region_info config{};
  config.argsz = sizeof config;
  config.index = VFIO_PCI_CONFIG_REGION_INDEX;
  if (::ioctl(device_, VFIO_DEVICE_GET_REGION_INFO, &config) != 0) {
    const int err = errno;
    fail("VFIO_DEVICE_GET_REGION_INFO of the config region", err, doctor);
  }
  config_offset_ = config.offset;
}

void vfio_device::map_bar0() {
  // The region info, with its capability chain (a sparse mmap capability
  // says which parts of BAR0 may be mapped when the MSI-X table is kept out).
  std::vector<std::uint64_t> buf(round_up(sizeof(vfio_region_info), 8) / 8);
  auto* info = reinterpret_cast<vfio_region_info*>(buf.data());
  info->argsz = sizeof(vfio_region_info);
  info->index = VFIO_PCI_BAR0_REGION_INDEX;
  if (::ioctl(device_, VFIO_DEVICE_GET_REGION_INFO, info) != 0) {
    const int err = errno;
    fail("VFIO_DEVICE_GET_REGION_INFO of BAR0", err, doctor);
  }
  if (info->argsz > sizeof(vfio_region_info)) {
    const std::uint32_t argsz = info->argsz;
    buf.assign(round_up(argsz, 8) / 8, 0);
    info = reinterpret_cast<vfio_region_info*>(buf.data());
    info->argsz = argsz;
    info->index = VFIO_PCI_BAR0_REGION_INDEX;
    if (::ioctl(device_, VFIO_DEVICE_GET_REGION_INFO, info) != 0) {
      const int err = errno;
      fail("VFIO_DEVICE_GET_REGION_INFO of BAR0 (with capabilities)", err, doctor);
    }
  }
  const std::uint64_t need = nvme_reg::doorbells + 4 * 4;  // admin + one I/O pair, DSTRD 0
  if ((info->flags & VFIO_REGION_INFO_FLAG_MMAP) == 0)
    fail("BAR0 cannot be mapped (VFIO_REGION_INFO_FLAG_MMAP clear)", 0,
         "the driver needs BAR0 in its address space; " + std::string(doctor));
  std::uint64_t map_bytes = info->size;
  if ((info->flags & VFIO_REGION_INFO_FLAG_CAPS) != 0 && info->cap_offset != 0) {
    const auto* bytes = reinterpret_cast<const std::byte*>(buf.data());
    std::uint32_t at = info->cap_offset;
    while (at != 0 && at + sizeof(vfio_info_cap_header) <= info->argsz) {
      const auto* h = reinterpret_cast<const vfio_info_cap_header*>(bytes + at);
      if (h->id == VFIO_REGION_INFO_CAP_SPARSE_MMAP) {
        const auto* s = reinterpret_cast<const vfio_region_info_cap_sparse_mmap*>(h);
        map_bytes = 0;  // only an area from offset 0 serves
        for (std::uint32_t i = 0; i < s->nr_areas; ++i)
          if (s->areas[i].offset == 0) map_bytes = s->areas[i].size;
        break;
      }
      at = h->next;
    }
  }
  if (info->size < need || map_bytes < need)
    fail("BAR0 has " + std::to_string(info->size) + " bytes, " + std::to_string(map_bytes) +
             " of them mappable from offset 0; the doorbells need " + std::to_string(need),
         0, "is this an NVMe controller? " + std::string(doctor));
  void* p = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, device_,
                   static_cast<off_t>(info->offset));
  if (p == MAP_FAILED) {
    const int err = errno;
    fail("mmap of " + std::to_string(map_bytes) + " bytes of BAR0", err, doctor);
  }
  bar_ = static_cast<std::byte*>(p);
  bar_bytes_ = map_bytes;
  const auto* regs = reinterpret_cast<const volatile std::uint32_t*>(bar_);
  const std::uint32_t cap_lo = regs[nvme_reg::cap / 4], cap_hi = regs[nvme_reg::cap / 4 + 1];
  if (cap_lo == ~0u && cap_hi == ~0u)
    fail("BAR0 reads all ones (CAP)", 0, "the device does not answer: check it in `lspci -vv`");
  const std::uint32_t dstrd = cap_hi & 0xf;  // CAP bits 35:32
  const std::uint64_t need_stride = nvme_reg::doorbells + 4ull * (4u << dstrd);
  if (bar_bytes_ < need_stride)
    fail("BAR0 maps " + std::to_string(bar_bytes_) + " bytes; with CAP.DSTRD " +
             std::to_string(dstrd) + " the doorbells of the admin and one I/O queue pair need " +
             std::to_string(need_stride),
         0, doctor);
}

std::uint16_t vfio_device::pci_command() const {
  std::uint16_t cmd = 0;
  const off_t at = static_cast<off_t>(config_offset_ + PCI_COMMAND);
  if (::pread(device_, &cmd, sizeof cmd, at) != static_cast<ssize_t>(sizeof cmd)) {
    const int err = errno;
    fail("read of the PCI command register (config region)", err, doctor);
  }
  return cmd;
}

void vfio_device::enable_bus_master() {
  const std::uint16_t want = PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE;
  const std::uint16_t cmd = static_cast<std::uint16_t>(pci_command() | want);
  const off_t at = static_cast<off_t>(config_offset_ + PCI_COMMAND);
  if (::pwrite(device_, &cmd, sizeof cmd, at) != static_cast<ssize_t>(sizeof cmd)) {
    const int err = errno;
    fail("write of the PCI command register (config region)", err, doctor);
  }
  const std::uint16_t now = pci_command();
  if ((now & (PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER)) !=
      (PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER))
    fail("bus mastering did not turn on (PCI command " + hex(now) + ")", 0, doctor);
}

void vfio_device::reset() {
  if (!can_reset_)
    fail("no function-level reset (VFIO_DEVICE_FLAGS_RESET clear)", 0,
         "drop the driver and reopen the device instead");
  if (::ioctl(device_, VFIO_DEVICE_RESET) != 0) {
    const int err = errno;
    fail("VFIO_DEVICE_RESET", err, doctor);
  }
  enable_bus_master();
}

}  // namespace warpstore
