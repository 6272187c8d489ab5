// controller=auto (the default): the memory controller over the page cache
// for a read-only file that is in memory and small enough to pin, the host
// controller for anything else; either way the array reads the file's bytes.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "controller/memory_controller.h"
#include "test_files.h"
#include "warpstore/array.cuh"
#include "warpstore/controller.h"

namespace warpstore {
namespace {

options auto_options() {
  options o;
  o.controller = controller_kind::automatic;
  o.cache_bytes = 1 << 20;
  o.service_threads = 1;
  return o;
}

// Reads a whole pattern file through the controller `o` picks and returns
// its name.
std::string read_through(const test::pattern_file& f, const options& o) {
  array<std::uint64_t> a(f.path(), 0, o);
  std::uint64_t wrong = 0;
  for (std::uint64_t i = 0; i < a.size(); i += 61) wrong += a.ref()[i] != tools::pattern_word(i * 8);
  EXPECT_EQ(wrong, 0u);
  a.check();
  return a.shared_controller()->name();
}

// Drops the file's clean pages from the page cache; false where they stay
// (tmpfs keeps them: nothing to test there).
bool evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const auto ctl = make_controller(path, [] {
    options o = auto_options();
    o.direct = direct_io::off;
    return o;
  }());
  ::close(fd);
  return std::string(ctl->name()) == "host";
}

TEST(ControllerChoice, AutoIsTheDefault) { EXPECT_EQ(options{}.controller, controller_kind::automatic); }

TEST(ControllerChoice, AResidentReadOnlyFileGetsTheMemoryController) {
  test::pattern_file f(1 << 20);
  (void)read_through(f, [] { options o = auto_options(); o.controller = controller_kind::host; return o; }());
  EXPECT_EQ(read_through(f, auto_options()), "memory");
}

TEST(ControllerChoice, AWritableFileGetsTheHostController) {
  test::pattern_file f(1 << 20);
  options o = auto_options();
  o.writable = true;
  EXPECT_EQ(read_through(f, o), "host");
}

TEST(ControllerChoice, AFileOverTheLimitGetsTheHostController) {
  test::pattern_file f(1 << 20);
  options o = auto_options();
  o.mapped_max_bytes = (1 << 20) - 1;
  EXPECT_EQ(read_through(f, o), "host");
  o.mapped_max_bytes = 1 << 20;
  EXPECT_EQ(read_through(f, o), "memory");
}

TEST(ControllerChoice, AskingForODirectGetsTheHostController) {
  test::pattern_file f(1 << 20);
  options o = auto_options();
  o.direct = direct_io::on;
  EXPECT_EQ(read_through(f, o), "host");
}

TEST(ControllerChoice, AFileMostlyOnDiskGetsTheHostController) {
  test::pattern_file f(4 << 20);
  if (!evict(f.path())) GTEST_SKIP() << "the page cache keeps the file's pages (tmpfs?)";
  EXPECT_EQ(read_through(f, auto_options()), "host");
}

// The memory controller's READs over a read-only file, mapped or copied
// (the CPU target copies), return its bytes up to a partial last block,
// whose tail reads as zeros.
TEST(ControllerChoice, TheMemoryControllerReadsAPartialLastBlockAsZeros) {
  const std::uint64_t bytes = (1 << 20) + 100;
  test::pattern_file f(bytes);
  auto file = std::make_shared<backing_file>(f.path(), direct_io::off, file_access::read_only);
  memory_controller ctl(file, 2, 0, /*map=*/true);
  const std::uint64_t block = (1 << 20) / nvme::block_size;
  std::vector<std::byte> got(nvme::block_size);
  ASSERT_TRUE(ctl.device_ref().memory.execute_read(1u, io_request{block, 1, got.data()}).success());
  for (std::uint64_t k = 0; k < nvme::block_size; k += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, got.data() + k, 8);
    const std::uint64_t off = (1 << 20) + k;
    EXPECT_EQ(w, off + 8 <= bytes ? tools::pattern_word(off) : (off >= bytes ? 0 : w)) << k;
  }
  EXPECT_FALSE(ctl.device_ref().memory.execute_read(1u, io_request{block + 1, 1, got.data()}).success());
}

// A file that shrinks under the memory controller is reported at the next
// check, naming the file, rather than served from the pages it had.
TEST(ControllerChoice, AFileShrunkUnderTheMemoryControllerIsAnError) {
  test::pattern_file f(1 << 20);
  array<std::uint64_t> a(f.path(), 0, auto_options());
  ASSERT_STREQ(a.shared_controller()->name(), "memory");
  EXPECT_EQ(a.ref()[5], tools::pattern_word(5 * 8));
  a.check();
  ASSERT_EQ(::truncate(f.path().c_str(), 64 << 10), 0);
  try {
    a.check();
    FAIL() << "no error after the file shrank";
  } catch (const file_error& e) {
    EXPECT_EQ(e.code().value(), ESTALE);
    EXPECT_NE(std::string(e.what()).find(f.path()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shrank to 65536 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace warpstore
