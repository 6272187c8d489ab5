// The VFIO layer (src/controller/vfio.h) without a device: PCI address
// parsing; vfio_dma_memory over a recording fake mapper (alignment, zeroed
// pages, IOVA ranges, translation, unmapping, failures, reuse, external
// mappings, threads); opening a device where VFIO or the device is missing
// (the real /sys and /dev of this machine, and fake trees), each failure
// naming its step and leaking no fd; and the NVMe driver core bringing the
// software model up and moving blocks through vfio_dma_memory with an
// identity IOVA policy (the model takes IOVA == virtual address).
#include "controller/vfio.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "controller/nvme_driver.h"
#include "controller/nvme_model.h"
#include "test_files.h"
#include "warpstore/error.h"

namespace warpstore {
namespace {

namespace fs = std::filesystem;
namespace nm = nvme_model;
using namespace std::chrono_literals;

constexpr std::uint64_t page = 4096;

// Records every map and unmap, and checks what a type1 container would:
// no IOVA overlap, unmaps that match a map exactly. Can fail on request.
class recording_mapper final : public iommu_mapper {
 public:
  struct mapping {
    std::uint64_t vaddr, iova, bytes;
    friend bool operator==(const mapping&, const mapping&) = default;
  };

  void map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t bytes) override {
    std::lock_guard lock(mutex_);
    ++maps_;
    if (fail_maps_ > 0) {
      --fail_maps_;
      throw runtime_error("fake VFIO_IOMMU_MAP_DMA: Cannot allocate memory");
    }
    auto after = live_.lower_bound(iova + bytes);
    if (after != live_.begin() &&
        std::prev(after)->second.iova + std::prev(after)->second.bytes > iova)
      ADD_FAILURE() << "IOVA " << iova << " overlaps a live mapping";
    live_.emplace(iova, mapping{vaddr, iova, bytes});
    history_.push_back({vaddr, iova, bytes});
  }

  void unmap(std::uint64_t iova, std::uint64_t bytes) override {
    std::lock_guard lock(mutex_);
    if (fail_unmaps_ > 0) {
      --fail_unmaps_;
      throw runtime_error("fake VFIO_IOMMU_UNMAP_DMA: Invalid argument");
    }
    auto it = live_.find(iova);
    if (it == live_.end() || it->second.bytes != bytes) {
      ADD_FAILURE() << "unmap of " << bytes << " bytes at IOVA " << iova << " matches no map";
      return;
    }
    unmapped_.push_back(it->second);
    live_.erase(it);
  }

  void fail_next_maps(int n) {
    std::lock_guard lock(mutex_);
    fail_maps_ = n;
  }
  void fail_next_unmaps(int n) {
    std::lock_guard lock(mutex_);
    fail_unmaps_ = n;
  }
  std::vector<mapping> live() const {
    std::lock_guard lock(mutex_);
    std::vector<mapping> v;
    for (const auto& [iova, m] : live_) v.push_back(m);
    return v;
  }
  std::vector<mapping> unmapped() const {
    std::lock_guard lock(mutex_);
    return unmapped_;
  }
  std::size_t maps() const {
    std::lock_guard lock(mutex_);
    return maps_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::uint64_t, mapping> live_;
  std::vector<mapping> history_, unmapped_;
  std::size_t maps_ = 0;
  int fail_maps_ = 0, fail_unmaps_ = 0;
};

std::uintptr_t addr(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

bool mapped_in_process(const void* p) {
  // msync fails with ENOMEM for an address that is not mapped.
  return ::msync(const_cast<void*>(p), page, MS_ASYNC) == 0;
}

std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// ---- PCI addresses ---------------------------------------------------------------

TEST(VfioPciAddress, ParsesTheFormsTheDoctorTakes) {
  const pci_address a = pci_address::parse("0000:65:00.0");
  EXPECT_EQ(a, (pci_address{0, 0x65, 0, 0}));
  EXPECT_EQ(a.text(), "0000:65:00.0");
  EXPECT_EQ(pci_address::parse("nvme://0000:65:00.0"), a);
  EXPECT_EQ(pci_address::parse("65:00.0"), a);
  const pci_address b = pci_address::parse("ABCD:eF:1f.7");
  EXPECT_EQ(b, (pci_address{0xabcd, 0xef, 0x1f, 7}));
  EXPECT_EQ(b.text(), "abcd:ef:1f.7");
  EXPECT_EQ(pci_address::parse("nvme://ffff:ff:1f.7").text(), "ffff:ff:1f.7");
}

TEST(VfioPciAddress, RejectsAnythingElseSayingWhy) {
  const std::pair<const char*, const char*> bad[] = {
      {"", "empty"},
      {"nvme://", "empty"},
      {"0000:65:00", "wrong length"},
      {"0000:65:00.0 ", "wrong length"},
      {" 0000:65:00.0", "wrong length"},
      {"0000:65:00.0/", "wrong length"},
      {"000:65:00.00", "domain"},
      {"0000-65:00.0", "domain"},
      {"g000:65:00.0", "domain"},
      {"0000:6x:00.0", "bus"},
      {"0000:65-00.0", "bus"},
      {"0000:65:0g.0", "device is not"},
      {"0000:65:00:0", "device is not"},
      {"0000:65:20.0", "over 0x1f"},
      {"0000:65:00.8", "over 7"},
      {"0000:65:00.z", "function is not"},
      {"NVME://0000:65:00.0", "wrong length"},
      {"/dev/vfio/12", "domain"},
      {"/dev/vfio/1", "wrong length"},
  };
  for (const auto& [text, why] : bad) {
    try {
      pci_address::parse(text);
      ADD_FAILURE() << "'" << text << "' parsed";
    } catch (const invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("'") + text + "'"), std::string::npos) << m;
      EXPECT_NE(m.find(why), std::string::npos) << text << ": " << m;
      EXPECT_NE(m.find("expected domain:bus:device.function"), std::string::npos) << m;
      EXPECT_EQ(e.kind(), error_kind::invalid_argument);
    }
  }
  EXPECT_THROW(pci_address::parse("zz"), std::invalid_argument);
}

// ---- vfio_dma_memory -------------------------------------------------------------

TEST(VfioDmaMemory, AllocationsArePageAlignedZeroedAndMappedWithAlignedIovas) {
  recording_mapper mapper;
  vfio_dma_memory mem(mapper);
  struct ask {
    std::size_t bytes, align;
  };
  const ask asks[] = {{1, 1},          {100, 64},      {4096, 4096},       {5000, 8},
                      {8192, 65536},   {12288, 16384}, {3 << 20, 2 << 20}, {4096, 0},
                      {65536, 1 << 30}};
  std::vector<void*> ps;
  for (const ask& a : asks) {
    void* p = mem.alloc(a.bytes, a.align);
    ps.push_back(p);
    const std::uint64_t al = std::max<std::uint64_t>(a.align, page);
    const std::uint64_t n = (std::max<std::size_t>(a.bytes, 1) + page - 1) / page * page;
    EXPECT_EQ(addr(p) % al, 0u) << a.bytes << " bytes, align " << a.align;
    const auto* b = static_cast<const unsigned char*>(p);
    EXPECT_TRUE(std::all_of(b, b + n, [](unsigned char c) { return c == 0; }));
    const std::uint64_t iova = mem.iova(p);
    EXPECT_EQ(iova % al, 0u) << a.bytes << " bytes, align " << a.align;
    EXPECT_GE(iova, std::uint64_t{1} << 32);
    EXPECT_LT(iova + n, std::uint64_t{1} << 39);
    const auto live = mapper.live();
    const auto it =
        std::find_if(live.begin(), live.end(), [&](const auto& m) { return m.vaddr == addr(p); });
    ASSERT_NE(it, live.end());
    EXPECT_EQ(it->iova, iova);
    EXPECT_EQ(it->bytes, n);
    std::memset(p, 0xa5, n);  // writable, every page
  }
  // No two IOVA ranges overlap (the mapper checks each map against the live
  // ones; here all of them at once).
  auto live = mapper.live();
  std::sort(live.begin(), live.end(), [](auto& x, auto& y) { return x.iova < y.iova; });
  for (std::size_t i = 1; i < live.size(); ++i)
    EXPECT_LE(live[i - 1].iova + live[i - 1].bytes, live[i].iova);
  EXPECT_EQ(mem.mappings(), std::size(asks));
  for (void* p : ps) mem.free(p);
  EXPECT_EQ(mem.mappings(), 0u);
  EXPECT_TRUE(mapper.live().empty());
}

TEST(VfioDmaMemory, TranslatesInteriorPointersAndRefusesForeignOnes) {
  recording_mapper mapper;
  vfio_dma_memory mem(mapper);
  auto* p = static_cast<std::byte*>(mem.alloc(3 * page, page));
  const std::uint64_t base = mem.iova(p);
  EXPECT_EQ(mem.iova(p + 1), base + 1);
  EXPECT_EQ(mem.iova(p + page + 123), base + page + 123);
  EXPECT_EQ(mem.iova(p + 3 * page - 1), base + 3 * page - 1);
  int on_stack = 0;
  std::vector<int> on_heap(10);
  for (const void* foreign :
       {static_cast<const void*>(&on_stack), static_cast<const void*>(on_heap.data()),
        static_cast<const void*>(nullptr)}) {
    try {
      (void)mem.iova(foreign);
      ADD_FAILURE() << "iova() of a foreign pointer answered";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("lies in no DMA allocation"), std::string::npos)
          << e.what();
    }
  }
  mem.free(p);
  EXPECT_THROW((void)mem.iova(p), invalid_argument);  // freed: no longer translated
  mem.free(nullptr);
  mem.free(&on_stack);  // not an allocation: ignored
}

TEST(VfioDmaMemory, FreeUnmapsExactlyWhatWasMappedAndReleasesTheMemory) {
  recording_mapper mapper;
  vfio_dma_memory mem(mapper);
  void* a = mem.alloc(10000, 4096);
  void* b = mem.alloc(page, 65536);
  const auto live = mapper.live();
  ASSERT_EQ(live.size(), 2u);
  mem.free(a);
  ASSERT_EQ(mapper.unmapped().size(), 1u);
  const auto was_a =
      std::find_if(live.begin(), live.end(), [&](const auto& m) { return m.vaddr == addr(a); });
  ASSERT_NE(was_a, live.end());
  EXPECT_EQ(mapper.unmapped()[0], *was_a);
  EXPECT_EQ(mapper.unmapped()[0].bytes, 3 * page);
  EXPECT_FALSE(mapped_in_process(a));
  EXPECT_TRUE(mapped_in_process(b));
  mem.free(b);
  EXPECT_FALSE(mapped_in_process(b));
  EXPECT_TRUE(mapper.live().empty());
}

TEST(VfioDmaMemory, AFailedMapLeavesNothingAllocated) {
  recording_mapper mapper;
  vfio_dma_memory mem(mapper);
  mapper.fail_next_maps(1);
  EXPECT_THROW(mem.alloc(64 * 1024, page), runtime_error);
  EXPECT_EQ(mem.mappings(), 0u);
  EXPECT_TRUE(mapper.live().empty());
  // The range went back: the next allocation starts at the window's base.
  void* p = mem.alloc(64 * 1024, page);
  EXPECT_EQ(mem.iova(p), std::uint64_t{1} << 32);
  mem.free(p);
  // And the memory went back to the kernel. Catch the address the mapper was
  // given: a failing mapper that remembers it.
  struct remembering final : iommu_mapper {
    std::uint64_t vaddr = 0;
    void map(std::uint64_t v, std::uint64_t, std::uint64_t) override {
      vaddr = v;
      throw runtime_error("fake VFIO_IOMMU_MAP_DMA: refused");
    }
    void unmap(std::uint64_t, std::uint64_t) override { ADD_FAILURE() << "unmap"; }
  } failing;
  vfio_dma_memory mem2(failing);
  EXPECT_THROW(mem2.alloc(8 * page, page), runtime_error);
  ASSERT_NE(failing.vaddr, 0u);
  EXPECT_FALSE(mapped_in_process(reinterpret_cast<void*>(failing.vaddr)));
  EXPECT_EQ(mem2.mappings(), 0u);
}

TEST(VfioDmaMemory, RangesAreReusedAfterFreeAndCoalesce) {
  recording_mapper mapper;
  vfio_dma_memory mem(mapper);
  const std::uint64_t base = std::uint64_t{1} << 32;
  void* a = mem.alloc(page, page);
  void* b = mem.alloc(page, page);
  void* c = mem.alloc(page, page);
  EXPECT_EQ(mem.iova(a), base);
  EXPECT_EQ(mem.iova(b), base + page);
  EXPECT_EQ(mem.iova(c), base + 2 * page);
  mem.free(b);
  void* d = mem.alloc(page, page);  // first fit: b's range
  EXPECT_EQ(mem.iova(d), base + page);
  mem.free(a);
  mem.free(d);
  mem.free(c);
  // Freed neighbours coalesced: three pages fit at the base again.
  void* e = mem.alloc(3 * page, page);
  EXPECT_EQ(mem.iova(e), base);
  mem.free(e);
}

TEST(VfioDmaMemory, AFullWindowRaisesAndKeepsWhatIsMapped) {
  recording_mapper mapper;
  vfio_dma_options o;
  o.iova_base = std::uint64_t{1} << 32;
  o.iova_limit = o.iova_base + 16 * page;
  o.name = "0000:65:00.0";
  vfio_dma_memory mem(mapper, o);
  void* a = mem.alloc(16 * page, page);
  try {
    mem.alloc(page, page);
    ADD_FAILURE() << "allocated past the window";
  } catch (const runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no free IOVA range"), std::string::npos) << e.what();
    EXPECT_EQ(e.path(), "0000:65:00.0");
  }
  EXPECT_EQ(mem.mappings(), 1u);
  mem.free(a);
  EXPECT_THROW(mem.alloc(page, 3), invalid_argument);
  EXPECT_THROW(mem.alloc(page, std::size_t{2} << 30), invalid_argument);
  vfio_dma_options zero;
  zero.iova_base = 0;
  EXPECT_THROW(vfio_dma_memory(mapper, zero), invalid_argument);
}

TEST(VfioDmaMemory, AFailedUnmapKeepsTheMemoryAndTheRange) {
  recording_mapper mapper;
  vfio_dma_memory mem(mapper);
  void* a = mem.alloc(page, page);
  const std::uint64_t ia = mem.iova(a);
  mapper.fail_next_unmaps(1);
  mem.free(a);  // noexcept: counted, not raised
  EXPECT_EQ(mem.leaked_allocations(), 1u);
  EXPECT_TRUE(mapped_in_process(a));  // the device may still reach it
  void* b = mem.alloc(page, page);
  EXPECT_NE(mem.iova(b), ia);  // never handed out again
  mem.free(b);
}

TEST(VfioDmaMemory, ExternalMappingsTranslateAndRejectUnalignedMemory) {
  recording_mapper mapper;
  vfio_dma_memory mem(mapper);
  void* ext = std::aligned_alloc(page, 4 * page);
  ASSERT_NE(ext, nullptr);
  auto* p = static_cast<std::byte*>(ext);
  const std::uint64_t iova = mem.map_external(ext, 4 * page);
  EXPECT_EQ(iova % page, 0u);
  EXPECT_EQ(mem.iova(p + 2 * page + 7), iova + 2 * page + 7);
  EXPECT_EQ(mapper.live().size(), 1u);
  EXPECT_EQ(mapper.live()[0], (recording_mapper::mapping{addr(ext), iova, 4 * page}));
  EXPECT_THROW(mem.map_external(p + page, page), invalid_argument);  // overlaps
  EXPECT_THROW(mem.map_external(p + 1, page), invalid_argument);     // unaligned start
  EXPECT_THROW(mem.map_external(ext, page + 1), invalid_argument);   // unaligned length
  EXPECT_THROW(mem.map_external(ext, 0), invalid_argument);
  EXPECT_THROW(mem.map_external(nullptr, page), invalid_argument);
  EXPECT_THROW(mem.unmap_external(p + page), invalid_argument);  // not a start
  mem.free(ext);                                                 // not alloc()'d: ignored
  EXPECT_EQ(mem.iova(p), iova);
  void* own = mem.alloc(page, page);
  EXPECT_THROW(mem.unmap_external(own), invalid_argument);  // alloc()'d, not external
  // A failed unmap keeps the range in the table.
  mapper.fail_next_unmaps(1);
  EXPECT_THROW(mem.unmap_external(ext), runtime_error);
  EXPECT_EQ(mem.iova(p), iova);
  mem.unmap_external(ext);
  EXPECT_THROW((void)mem.iova(p), invalid_argument);
  EXPECT_EQ(mapper.unmapped().back(), (recording_mapper::mapping{addr(ext), iova, 4 * page}));
  EXPECT_TRUE(mapped_in_process(ext));  // still the caller's
  std::free(ext);
  mem.free(own);
}

TEST(VfioDmaMemory, TheDestructorUnmapsWhatIsLeft) {
  recording_mapper mapper;
  void* ext = std::aligned_alloc(page, page);
  void* a;
  {
    vfio_dma_memory mem(mapper);
    a = mem.alloc(2 * page, page);
    mem.map_external(ext, page);
    EXPECT_EQ(mapper.live().size(), 2u);
  }
  EXPECT_TRUE(mapper.live().empty());
  EXPECT_FALSE(mapped_in_process(a));
  EXPECT_TRUE(mapped_in_process(ext));
  std::free(ext);
}

TEST(VfioDmaMemory, ConcurrentAllocAndFreeStayConsistent) {
  recording_mapper mapper;
  vfio_dma_memory mem(mapper);
  constexpr unsigned threads = 8, rounds = 400;
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 rng(t);
      struct held {
        std::byte* p;
        std::size_t bytes;
        std::uint64_t iova;
        unsigned char tag;
      };
      std::vector<held> mine;
      for (unsigned r = 0; r < rounds; ++r) {
        if (mine.size() < 8 && (mine.empty() || rng() % 2 == 0)) {
          const std::size_t bytes = 1 + rng() % (5 * page);
          const std::size_t align = std::size_t{1} << (rng() % 17);
          auto* p = static_cast<std::byte*>(mem.alloc(bytes, align));
          const auto tag = static_cast<unsigned char>(rng());
          std::memset(p, tag, bytes);
          mine.push_back({p, bytes, mem.iova(p), tag});
          if (mine.back().iova % std::max<std::size_t>(align, page) != 0)
            ADD_FAILURE() << "IOVA not aligned to " << align;
        } else {
          const std::size_t i = rng() % mine.size();
          const held h = mine[i];
          const std::size_t off = rng() % h.bytes;
          if (mem.iova(h.p + off) != h.iova + off) ADD_FAILURE() << "translation moved";
          if (static_cast<unsigned char>(h.p[off]) != h.tag) ADD_FAILURE() << "memory changed";
          mem.free(h.p);
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      for (const held& h : mine) mem.free(h.p);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(mem.mappings(), 0u);
  EXPECT_TRUE(mapper.live().empty());
  EXPECT_EQ(mapper.unmapped().size(), mapper.maps());
  // Everything came back and coalesced: one allocation starts at the base.
  void* p = mem.alloc(64 * page, page);
  EXPECT_EQ(mem.iova(p), std::uint64_t{1} << 32);
  mem.free(p);
}

// ---- vfio_device where there is no VFIO ------------------------------------------

// Opens `address` expecting a runtime_error whose message holds every one of
// `want`; checks the fd count is unchanged and returns the error's errno.
int open_fails(const std::string& address, const vfio_device_options& o,
               std::initializer_list<const char*> want) {
  const std::size_t before = open_fds();
  int err = -1;
  try {
    vfio_device dev(address, o);
    ADD_FAILURE() << address << " opened";
  } catch (const runtime_error& e) {
    const std::string m = e.what();
    for (const char* w : want)
      EXPECT_NE(m.find(w), std::string::npos) << "want '" << w << "' in: " << m;
    EXPECT_EQ(e.path(), pci_address::parse(address).text()) << m;
    EXPECT_EQ(e.kind(), error_kind::runtime);
    err = e.info().sys_errno;
  }
  EXPECT_EQ(open_fds(), before) << "an fd leaked";
  return err;
}

TEST(VfioDevice, OpeningAnAbsentDeviceNamesIt) {
  // This machine's real /sys and /dev: no such PCI function.
  const int err =
      open_fails("nvme://ffff:ff:1f.7", {},
                 {"vfio ffff:ff:1f.7: no such PCI device", "/sys/bus/pci/devices/ffff:ff:1f.7",
                  "lspci -D", "warpstore nvme doctor"});
  EXPECT_EQ(err, ENOENT);
  EXPECT_THROW(vfio_device("0000:65:00.9"), invalid_argument);
}

// A fake sysfs and /dev, one piece more present per step.
class VfioFakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::temp_path("vfio");
    fs::remove(root_);
    dev_dir_ = fs::path(root_) / "sys/bus/pci/devices" / bdf_;
    fs::create_directories(dev_dir_);
    fs::create_directories(fs::path(root_) / "sys/kernel/iommu_groups/7");
    fs::create_directories(fs::path(root_) / "sys/bus/pci/drivers/nvme");
    fs::create_directories(fs::path(root_) / "sys/bus/pci/drivers/vfio-pci");
    fs::create_directories(fs::path(root_) / "dev");
    o_.paths.sysfs = root_ + "/sys";
    o_.paths.dev = root_ + "/dev";
  }
  void TearDown() override { fs::remove_all(root_); }
  void link(const std::string& name, const std::string& target) {
    fs::remove(dev_dir_ / name);
    fs::create_symlink(target, dev_dir_ / name);
  }

  const std::string bdf_ = "0000:65:00.0";
  std::string root_;
  fs::path dev_dir_;
  vfio_device_options o_;
};

TEST_F(VfioFakeTree, EachMissingPieceIsNamedWithItsFix) {
  EXPECT_EQ(open_fails(bdf_, o_, {"no IOMMU group", "iommu_group", "intel_iommu=on"}), ENOENT);
  link("iommu_group", "../../../../kernel/iommu_groups/7");
  EXPECT_EQ(
      open_fails(bdf_, o_, {"bound to no driver", "bind it to vfio-pci", "warpstore nvme doctor"}),
      ENOENT);
  link("driver", "../../../../bus/pci/drivers/nvme");
  EXPECT_EQ(open_fails(bdf_, o_, {"bound to nvme, not vfio-pci", "bind it to vfio-pci"}), 0);
  link("driver", "../../../../bus/pci/drivers/vfio-pci");
  EXPECT_EQ(open_fails(bdf_, o_,
                       {"cannot open the VFIO container", "/dev/vfio/vfio",
                        "No such file or directory", "modprobe vfio-pci"}),
            ENOENT);
  // A container node that is not VFIO's: it opens, its first ioctl fails,
  // and the fd is closed again (open_fails counts).
  fs::create_directories(fs::path(root_) / "dev/vfio");
  { std::ofstream(fs::path(root_) / "dev/vfio/vfio") << ""; }
  EXPECT_EQ(open_fails(bdf_, o_, {"VFIO_GET_API_VERSION", "/dev/vfio/vfio"}), ENOTTY);
}

// A device present and bound in (fake) sysfs, and this machine's real /dev,
// where VFIO is not loaded.
TEST_F(VfioFakeTree, ThisMachinesDevHasNoVfioContainer) {
  if (::access("/dev/vfio/vfio", F_OK) == 0) GTEST_SKIP() << "this machine has /dev/vfio/vfio";
  link("iommu_group", "../../../../kernel/iommu_groups/7");
  link("driver", "../../../../bus/pci/drivers/vfio-pci");
  vfio_device_options o = o_;
  o.paths.dev = "/dev";
  EXPECT_EQ(open_fails(bdf_, o, {"cannot open the VFIO container /dev/vfio/vfio",
                                 "modprobe vfio-pci", "warpstore nvme doctor"}),
            ENOENT);
}

TEST_F(VfioFakeTree, AGroupLinkThatIsNoNumberIsRefused) {
  link("iommu_group", "../../../../kernel/iommu_groups/seven");
  open_fails(bdf_, o_, {"names 'seven', not a number"});
}

// ---- the driver core over vfio_dma_memory, against the software model ------------

TEST(VfioDmaMemoryWithModel, TheDriverBringsTheModelUpAndMovesBlocks) {
  test::pattern_file file(1 << 20);
  nm::config cfg;
  cfg.path = file.path();
  cfg.max_io_queues = 2;
  cfg.max_queue_entries = 64;
  cfg.ready_delay = 1ms;
  nm::device dev(cfg);

  recording_mapper mapper;  // a passthrough: the model reads IOVA == address
  vfio_dma_options mo;
  mo.policy = iova_policy::identity;
  mo.name = "model";
  vfio_dma_memory mem(mapper, mo);
  {
    nvme_driver_options o;
    o.name = "model";
    o.io_queues = 2;
    o.io_queue_entries = 32;
    o.admin_timeout = 2s;
    o.io_timeout = 2s;
    nvme_driver drv(nvme_bar{dev.bar(), dev.bar_bytes()}, mem, o);
    EXPECT_EQ(drv.identity().block_size, 512u);
    EXPECT_EQ(drv.identity().blocks, (1u << 20) / 512);
    ASSERT_EQ(drv.queue_pairs().size(), 2u);
    for (const nvme_queue_pair& q : drv.queue_pairs()) {
      EXPECT_EQ(q.sq_iova, mem.iova(q.sq));
      EXPECT_EQ(q.cq_iova, mem.iova(q.cq));
    }
    // Every ring and scratch page the driver holds went through the mapper.
    EXPECT_EQ(mapper.live().size(), mem.mappings());
    EXPECT_GE(mem.mappings(), 6u);  // admin SQ+CQ, 2 x (SQ+CQ), ...

    // Reads and writes: one page, a PRP pair, a PRP list (64 KiB), from a
    // buffer at an offset in its page; and from memory mapped externally.
    std::mt19937_64 rng(7);
    const std::pair<std::uint64_t, std::uint64_t> runs[] = {{3, 8}, {100, 9}, {300, 128}};
    for (const auto& [lba, blocks] : runs) {
      const std::size_t n = blocks * 512;
      auto* out = static_cast<std::byte*>(mem.alloc(n + page, page));
      auto* in = static_cast<std::byte*>(mem.alloc(n + page, page));
      for (std::size_t i = 0; i < n; ++i) out[512 + i] = static_cast<std::byte>(rng());
      drv.write_blocks(1, lba, blocks, out + 512);
      drv.flush(1);
      const auto on_disk = test::file_bytes_at(file.path(), lba * 512, n);
      EXPECT_EQ(std::memcmp(on_disk.data(), out + 512, n), 0) << blocks << " blocks at " << lba;
      drv.read_blocks(2, lba, blocks, in + 1024);
      EXPECT_EQ(std::memcmp(in + 1024, out + 512, n), 0) << blocks << " blocks at " << lba;
      mem.free(out);
      mem.free(in);
    }
    void* ext = std::aligned_alloc(page, 16 * page);
    ASSERT_NE(ext, nullptr);
    mem.map_external(ext, 16 * page);
    drv.read_blocks(1, 300, 128, ext);
    const auto want = test::file_bytes_at(file.path(), 300 * 512, 128 * 512);
    EXPECT_EQ(std::memcmp(ext, want.data(), want.size()), 0);
    mem.unmap_external(ext);
    std::free(ext);
    EXPECT_TRUE(drv.shutdown().clean());
  }
  // The driver freed everything it took, and each free unmapped it.
  EXPECT_EQ(mem.mappings(), 0u);
  EXPECT_TRUE(mapper.live().empty());
  EXPECT_EQ(mapper.unmapped().size(), mapper.maps());
}

}  // namespace
}  // namespace warpstore
