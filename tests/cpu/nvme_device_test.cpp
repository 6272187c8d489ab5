// The `nvme` controller: nvme:// paths, the settings that pick it, the
// refusals, opening a device on a machine without VFIO, and the device
// variant of nvme_controller (BAR0, IOMMU-mapped DMA memory, the namespace
// as the array's bytes) over the software model's registers and a
// recording IOMMU mapper. No test here reaches a real device or a real
// kernel's VFIO.
#include "controller/nvme_controller.h"
#include "controller/nvme_target.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "test_files.h"
#include "warpstore/array.cuh"
#include "warpstore/controller.h"
#include "warpstore/error.h"
#include "warpstore/settings_table.h"

namespace warpstore {
namespace {

namespace fs = std::filesystem;

std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// The message of what `f` raises as E, or a failure.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "nothing (of the expected type) was raised";
  return {};
}

// ---- nvme:// paths ---------------------------------------------------------------

TEST(NvmeTarget, ParsesTheAddressAndTheNamespace) {
  const nvme_target a = nvme_target::parse("nvme://0000:65:00.0");
  EXPECT_EQ(a.address, pci_address::parse("0000:65:00.0"));
  EXPECT_EQ(a.nsid, 1u);
  EXPECT_EQ(a.text(), "nvme://0000:65:00.0/ns1");
  const nvme_target b = nvme_target::parse("nvme://0000:65:00.0/ns2");
  EXPECT_EQ(b.nsid, 2u);
  EXPECT_EQ(b.text(), "nvme://0000:65:00.0/ns2");
  // Without the domain, upper-case hex and scheme, the largest NSID.
  const nvme_target c = nvme_target::parse("NVMe://AB:1F.7/ns4294967294");
  EXPECT_EQ(c.address.text(), "0000:ab:1f.7");
  EXPECT_EQ(c.nsid, 4294967294u);
  EXPECT_EQ(nvme_target::parse(c.text()), c);
  EXPECT_TRUE(nvme_target::names_device("nvme://x"));
  EXPECT_TRUE(nvme_target::names_device("NVME://0000:65:00.0"));
  EXPECT_FALSE(nvme_target::names_device("/dev/nvme0n1"));
  EXPECT_FALSE(nvme_target::names_device("nvme:/0000:65:00.0"));
  EXPECT_FALSE(nvme_target::names_device("0000:65:00.0"));
}

TEST(NvmeTarget, RefusesAnythingElseNamingIt) {
  const struct {
    const char* path;
    const char* says;
  } bad[] = {
      {"nvme://", "PCI address"},
      {"nvme://0000:65:00.9", "function number is over 7"},
      {"nvme://0000:65:00", "wrong length"},
      {"nvme://0000:65:00.0/", "namespace must be /ns<N>"},
      {"nvme://0000:65:00.0/ns", "namespace must be /ns<N>"},
      {"nvme://0000:65:00.0/ns0", "namespace must be /ns<N>"},
      {"nvme://0000:65:00.0/ns01", "without leading zeros"},
      {"nvme://0000:65:00.0/ns4294967295", "from 1 to 4294967294"},
      {"nvme://0000:65:00.0/ns99999999999", "namespace must be /ns<N>"},
      {"nvme://0000:65:00.0/ns-1", "namespace must be /ns<N>"},
      {"nvme://0000:65:00.0/ns2/", "namespace must be /ns<N>"},
      {"nvme://0000:65:00.0/ns2/x", "namespace must be /ns<N>"},
      {"nvme://0000:65:00.0/n1", "namespace must be /ns<N>"},
      {"nvme://0000:65:00.0:ns1", "wrong length"},
      {"/data/file.bin", "not an NVMe device path"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.path);
    try {
      (void)nvme_target::parse(b.path);
      ADD_FAILURE() << "parsed";
    } catch (const invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(b.path), std::string::npos) << m;
      EXPECT_NE(m.find(b.says), std::string::npos) << m;
      EXPECT_NE(m.find("nvme://0000:65:00.0/ns2"), std::string::npos) << m;  // the forms
      EXPECT_EQ(e.path(), b.path);
    }
  }
}

// ---- settings --------------------------------------------------------------------

TEST(NvmeSettings, NvmeIsAControllerInEveryPlace) {
  EXPECT_EQ(parse_controller("nvme"), controller_kind::nvme);
  EXPECT_EQ(parse_controller("NVMe"), controller_kind::nvme);
  EXPECT_STREQ(to_string(controller_kind::nvme), "nvme");
  EXPECT_EQ(parse_controller("nvme-model"), controller_kind::nvme_model);
  const std::string m = message_of<std::invalid_argument>([] { (void)parse_controller("vfio"); });
  EXPECT_NE(m.find("nvme-model or nvme"), std::string::npos) << m;
  const setting* s = find_setting("WARPSTORE_CONTROLLER");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(std::string(s->choices), "auto|host|memory|nvme-model|nvme");
  options o;
  s->apply(o, "nvme", "WARPSTORE_CONTROLLER");
  EXPECT_EQ(o.controller, controller_kind::nvme);
  EXPECT_EQ(s->text(o), "nvme");
  ::setenv("WARPSTORE_CONTROLLER", "nvme", 1);
  const options e = options::from_environment();
  ::unsetenv("WARPSTORE_CONTROLLER");
  EXPECT_EQ(e.controller, controller_kind::nvme);
}

// ---- make_controller: paths and controllers that do not go together --------------

TEST(NvmeMakeController, ControllerNvmeRefusesAFile) {
  test::pattern_file f(1 << 20);
  options o;
  o.controller = controller_kind::nvme;
  const std::size_t before = open_fds();
  try {
    (void)make_controller(f.path(), o);
    ADD_FAILURE() << "opened";
  } catch (const invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("controller=nvme"), std::string::npos) << m;
    EXPECT_NE(m.find(f.path()), std::string::npos) << m;
    EXPECT_NE(m.find("nvme://0000:65:00.0"), std::string::npos) << m;
    EXPECT_EQ(e.path(), f.path());
  }
  EXPECT_EQ(open_fds(), before);
}

TEST(NvmeMakeController, AnNvmePathRefusesEveryOtherController) {
  for (const controller_kind k :
       {controller_kind::host, controller_kind::memory, controller_kind::nvme_model}) {
    SCOPED_TRACE(to_string(k));
    options o;
    o.controller = k;
    const std::string m =
        message_of<invalid_argument>([&] { (void)make_controller("nvme://0000:65:00.0", o); });
    EXPECT_NE(m.find("names an NVMe device"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string("not controller=") + to_string(k)), std::string::npos) << m;
    // Not a file either: array opens refuse it the same way.
    EXPECT_THROW(array<float>("nvme://0000:65:00.0", 0, o), invalid_argument);
  }
}

TEST(NvmeMakeController, ABadNvmePathIsRefusedBeforeAnythingOpens) {
  for (const controller_kind k : {controller_kind::automatic, controller_kind::nvme}) {
    options o;
    o.controller = k;
    const std::string m = message_of<invalid_argument>(
        [&] { (void)make_controller("nvme://0000:65:00.0/ns0", o); });
    EXPECT_NE(m.find("nvme://0000:65:00.0/ns0"), std::string::npos) << m;
  }
}

// This machine has no such device and no VFIO: the open fails at the first
// missing piece, names it and the address, and leaves no descriptor open.
TEST(NvmeMakeController, OpeningADeviceWithoutVfioNamesTheMissingPiece) {
  if (fs::exists("/sys/bus/pci/devices/0000:65:00.0"))
    GTEST_SKIP() << "this machine has a PCI function at 0000:65:00.0";
  for (const controller_kind k : {controller_kind::automatic, controller_kind::nvme}) {
    SCOPED_TRACE(to_string(k));
    options o;
    o.controller = k;
    for (const char* path : {"nvme://0000:65:00.0", "nvme://0000:65:00.0/ns3"}) {
      SCOPED_TRACE(path);
      const std::size_t before = open_fds();
      try {
        (void)make_controller(path, o);
        ADD_FAILURE() << "opened";
      } catch (const runtime_error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("0000:65:00.0: no such PCI device"), std::string::npos) << m;
        EXPECT_NE(m.find("/sys/bus/pci/devices/0000:65:00.0"), std::string::npos) << m;
        EXPECT_EQ(e.path(), "0000:65:00.0");
        EXPECT_EQ(e.kind(), error_kind::runtime);
      }
      EXPECT_EQ(open_fds(), before) << "an fd leaked";
      EXPECT_THROW(array<float>(path, 0, o), runtime_error);
      EXPECT_EQ(open_fds(), before) << "an fd leaked";
    }
  }
}

// ---- the device variant over the model's registers and a recording mapper --------

// A passthrough IOMMU (the model reads IOVA as an address) that records what
// is mapped, and checks at each unmap that the device no longer runs:
// memory must not leave the IOMMU while the controller may still DMA.
class watching_mapper final : public iommu_mapper {
 public:
  explicit watching_mapper(const std::byte* bar) : bar_(bar) {}
  void map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t bytes) override {
    const std::lock_guard lock(mutex_);
    EXPECT_EQ(vaddr, iova);
    live_.emplace(iova, bytes);
    ++maps_;
  }
  void unmap(std::uint64_t iova, std::uint64_t bytes) override {
    const std::lock_guard lock(mutex_);
    const auto it = live_.find(iova);
    if (it == live_.end() || it->second != bytes) ADD_FAILURE() << "unmap matches no map";
    if (it != live_.end()) live_.erase(it);
    if (watching_) {
      const std::uint32_t csts = read32(nvme_reg::csts);
      const std::uint32_t cc = read32(nvme_reg::cc);
      const bool stopped = (csts & nvme_reg::csts_shst_mask) == nvme_reg::csts_shst_complete ||
                           (cc & nvme_reg::cc_en) == 0;
      if (!stopped) ++unmapped_while_running_;
    }
  }
  // Whether [p, p + bytes) lies in one live mapping.
  bool covers(const void* p, std::uint64_t bytes) const {
    const std::lock_guard lock(mutex_);
    const auto a = reinterpret_cast<std::uint64_t>(p);
    auto it = live_.upper_bound(a);
    if (it == live_.begin()) return false;
    --it;
    return a + bytes <= it->first + it->second;
  }
  std::size_t live() const {
    const std::lock_guard lock(mutex_);
    return live_.size();
  }
  void watch() { watching_ = true; }
  int unmapped_while_running() const { return unmapped_while_running_; }

 private:
  std::uint32_t read32(std::uint32_t off) const {
    return std::atomic_ref<const std::uint32_t>(*reinterpret_cast<const std::uint32_t*>(bar_ + off))
        .load();
  }
  const std::byte* bar_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, std::uint64_t> live_;
  std::size_t maps_ = 0;
  bool watching_ = false;
  int unmapped_while_running_ = 0;
};

options device_options(std::uint32_t line = 4096) {
  options o;
  o.controller = controller_kind::nvme;
  o.cache_bytes = 256 << 10;
  o.line_size = line;
  o.ways = 4;
  o.queue_pairs = 2;
  o.queue_depth = 16;
  o.timeout_ns = 20'000'000'000ull;
  return o;
}

struct model_device {
  explicit model_device(const test::pattern_file& f, bool writable = false) {
    nvme_model::config cfg;
    cfg.path = f.path();
    cfg.read_only = !writable;
    cfg.max_io_queues = 4;
    cfg.max_queue_entries = 64;
    cfg.ready_delay = std::chrono::microseconds(200);
    dev = std::make_unique<nvme_model::device>(cfg);
  }
  nvme_bar bar() const { return {dev->bar(), dev->bar_bytes()}; }
  std::unique_ptr<nvme_model::device> dev;
};

vfio_dma_options identity() {
  vfio_dma_options d;
  d.policy = iova_policy::identity;
  return d;
}

TEST(NvmeDeviceController, EverythingTheDeviceReachesIsMappedAndTheNamespaceIsTheArray) {
  test::pattern_file f(2 << 20);
  model_device m(f);
  watching_mapper mapper(m.dev->bar());
  const nvme_target target = nvme_target::parse("nvme://0000:65:00.0");
  {
    const options o = device_options(16384);  // lines over two pages: PRP lists too
    auto c = std::make_shared<nvme_controller>(m.bar(), mapper, target, o, o.line_size, identity());
    EXPECT_STREQ(c->name(), "nvme");
    EXPECT_TRUE(c->file().is_device_namespace());
    EXPECT_EQ(c->file().path(), "nvme://0000:65:00.0/ns1");
    EXPECT_EQ(c->file().size_bytes(), f.bytes());  // NSZE x 512
    EXPECT_FALSE(c->file().writable());
    ASSERT_NE(c->iommu_memory(), nullptr);
    EXPECT_EQ(c->iommu_memory()->mappings(), mapper.live());
    // The rings the GPU drives, its staging and the PRP lists: all in the
    // device's IOMMU domain, the device given their IOVAs.
    const detail::queue_pairs& q = c->queues();
    ASSERT_EQ(q.count(), 2u);
    EXPECT_TRUE(mapper.covers(q.staging(), q.staging_bytes()));
    for (std::uint32_t i = 0; i < q.count(); ++i) {
      const queue_pair_ref& v = q.view(i);
      EXPECT_TRUE(mapper.covers(v.sq, std::size_t{v.depth} * sizeof(nvme::command)));
      EXPECT_TRUE(mapper.covers(v.cq, std::size_t{v.depth} * sizeof(nvme::completion)));
      EXPECT_EQ(v.staging_device, c->iommu_memory()->iova(v.staging));
      ASSERT_NE(v.prp_lists, 0u);
      EXPECT_TRUE(mapper.covers(reinterpret_cast<const void*>(v.prp_lists), v.prp_list_stride));
      EXPECT_EQ(c->driver().options().nsid, 1u);
    }
    // Count 0: the whole namespace; the elements are the raw blocks from LBA 0.
    auto cache = std::make_shared<warpstore::cache>(o);
    {
      array<std::uint64_t> a(cache, c, 0, 0, o);
      EXPECT_EQ(a.size(), f.bytes() / 8);
      EXPECT_EQ(a.path(), "nvme://0000:65:00.0/ns1");
      const array_ref<std::uint64_t> ref = a.ref();
      std::uint64_t bad = 0;
      for (std::uint64_t i = 0; i < ref.size(); i += 61) bad += ref[i] != tools::pattern_word(i * 8);
      EXPECT_EQ(bad, 0u);
      a.check();
      // Bulk reads have no file to read from.
      std::vector<std::uint64_t> out(8);
      EXPECT_THROW(a.read_range(0, 64, out.data()), runtime_error);
    }
    // A count over the namespace is refused, naming it.
    const std::string too_big = message_of<invalid_argument>(
        [&] { array<std::uint64_t> b(cache, c, f.bytes() / 8 + 1, 0, o); });
    EXPECT_NE(too_big.find("nvme://0000:65:00.0/ns1"), std::string::npos) << too_big;
    mapper.watch();
  }
  // The device was shut down before any of its memory left the IOMMU, and
  // everything mapped was unmapped.
  EXPECT_EQ(mapper.unmapped_while_running(), 0);
  EXPECT_EQ(mapper.live(), 0u);
}

TEST(NvmeDeviceController, WritesReachTheNamespace) {
  test::pattern_file f(1 << 20);
  model_device m(f, /*writable=*/true);
  watching_mapper mapper(m.dev->bar());
  options o = device_options();
  o.writable = true;
  {
    auto c = std::make_shared<nvme_controller>(m.bar(), mapper, nvme_target::parse("nvme://65:00.0"),
                                               o, o.line_size, identity());
    EXPECT_TRUE(c->file().writable());
    auto cache = std::make_shared<warpstore::cache>(o);
    array<std::uint64_t> a(cache, c, 4096, 8192, o);
    array_ref<std::uint64_t> ref = a.ref();
    for (std::uint64_t i = 0; i < 4096; ++i) ref.store(i, ~i);
    a.flush();
    mapper.watch();
  }
  EXPECT_EQ(mapper.unmapped_while_running(), 0);
  const auto bytes = test::file_bytes_at(f.path(), 8192, 4096 * 8);
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < 4096; ++i) {
    std::uint64_t w;
    std::memcpy(&w, bytes.data() + i * 8, 8);
    bad += w != ~i;
  }
  EXPECT_EQ(bad, 0u);
}

TEST(NvmeDeviceController, RefusalsNameTheDevice) {
  test::pattern_file f(1 << 20);
  model_device m(f);
  watching_mapper mapper(m.dev->bar());
  const nvme_target t = nvme_target::parse("nvme://0000:65:00.0/ns2");  // the model has one
  const options o = device_options();
  const std::string no_ns = message_of<std::exception>(
      [&] { nvme_controller c(m.bar(), mapper, t, o, o.line_size, identity()); });
  EXPECT_NE(no_ns.find("0000:65:00.0"), std::string::npos) << no_ns;
  EXPECT_EQ(mapper.live(), 0u);
  options deep = o;
  deep.queue_depth = 128;  // the model grants 64
  const std::string depth = message_of<invalid_argument>([&] {
    nvme_controller c(m.bar(), mapper, nvme_target::parse("nvme://0000:65:00.0"), deep,
                      deep.line_size, identity());
  });
  EXPECT_NE(depth.find("nvme controller (nvme://0000:65:00.0/ns1)"), std::string::npos) << depth;
  EXPECT_NE(depth.find("queue_depth"), std::string::npos) << depth;
  EXPECT_EQ(mapper.live(), 0u);
}

}  // namespace
}  // namespace warpstore
