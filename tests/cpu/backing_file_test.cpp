// What a backing file may be: regular files and block devices (sized with
// BLKGETSIZE64, their logical block size from BLKSSZGET); directories,
// character devices and FIFOs are refused at once with what they are.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_files.h"
#include "warpstore/array.cuh"
#include "warpstore/controller.h"

using namespace warpstore;

namespace {

std::string open_error(const std::string& path, direct_io mode = direct_io::automatic) {
  try {
    backing_file f(path, mode);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string run(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  if (::pclose(p) != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// A loop device over `file` (losetup -f --show), detached at the end; empty
// path() when this machine cannot make one (not root, no losetup, no loop).
class loop_device {
 public:
  loop_device(const std::string& file, unsigned sector = 512) {
    if (::geteuid() != 0) {
      why_ = "not root";
      return;
    }
    path_ = run("losetup -f --show -b " + std::to_string(sector) + " '" + file + "'");
    if (path_.empty()) why_ = "losetup -f --show failed (no loop devices here?)";
  }
  ~loop_device() {
    if (!path_.empty()) run("losetup -d '" + path_ + "'");
  }
  loop_device(const loop_device&) = delete;
  loop_device& operator=(const loop_device&) = delete;
  const std::string& path() const { return path_; }
  const std::string& why_not() const { return why_; }

 private:
  std::string path_, why_;
};

}  // namespace

TEST(BackingFile, RegularFileIsSizedByStat) {
  test::pattern_file f(1 << 20);
  backing_file b(f.path(), direct_io::off);
  EXPECT_EQ(b.size_bytes(), 1u << 20);
  EXPECT_FALSE(b.block_device());
  EXPECT_EQ(b.logical_block_size(), 512u);
}

TEST(BackingFile, DirectoryIsRefused) {
  test::temp_dir d("bf-dir");
  for (direct_io mode : {direct_io::off, direct_io::automatic, direct_io::on}) {
    const std::string m = open_error(d.path, mode);
    EXPECT_TRUE(contains(m, "is a directory")) << m;
  }
  try {
    backing_file f(d.path, direct_io::off, file_access::read_write);
    FAIL() << "a directory opened read-write";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "is a directory")) << e.what();
  }
}

TEST(BackingFile, CharacterDeviceIsRefused) {
  const std::string m = open_error("/dev/null");
  EXPECT_TRUE(contains(m, "character device")) << m;
  EXPECT_TRUE(contains(m, "only regular files and block devices")) << m;
}

TEST(BackingFile, FifoIsRefusedWithoutWaitingForAWriter) {
  test::temp_dir d("bf-fifo");
  const std::string fifo = d.path + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto opened = std::async(std::launch::async, [&] { return open_error(fifo); });
  if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // The open waits for a writer: give it one so the thread ends.
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    opened.wait();
    if (fd >= 0) ::close(fd);
    FAIL() << "opening a FIFO blocked";
  }
  const std::string m = opened.get();
  EXPECT_TRUE(contains(m, "FIFO")) << m;
  EXPECT_TRUE(contains(m, "only regular files and block devices")) << m;
}

// A small cache and `threads` service threads with as many queues.
options small_options(std::uint32_t threads, direct_io mode) {
  options o;
  o.cache_bytes = 256 << 10;
  o.ways = 4;
  o.service_threads = threads;
  o.queue_pairs = threads;
  o.queue_depth = 8;
  o.direct = mode;
  return o;
}

TEST(BackingFile, LoopDeviceIsSizedAndRead) {
  test::pattern_file f(4 << 20);
  loop_device loop(f.path());
  if (loop.path().empty()) GTEST_SKIP() << "no loop device: " << loop.why_not();
  backing_file b(loop.path(), direct_io::automatic);
  EXPECT_TRUE(b.block_device());
  EXPECT_EQ(b.size_bytes(), 4u << 20);
  EXPECT_EQ(b.logical_block_size(), 512u);

  // The whole read path over the device, O_DIRECT and buffered.
  for (direct_io mode : {direct_io::on, direct_io::off}) {
    array<std::uint64_t> a(loop.path(), 0, small_options(2, mode));
    ASSERT_EQ(a.size(), (4u << 20) / 8);
    std::uint64_t wrong = 0;
    for (std::uint64_t i = 0; i < a.size(); i += 97)
      if (a.ref()[i] != tools::pattern_word(i * 8)) ++wrong;
    EXPECT_EQ(wrong, 0u);
    a.check();
  }
}

TEST(BackingFile, LoopDeviceWithBlocksLargerThanTheLineIsRefused) {
  test::pattern_file f(1 << 20);
  loop_device loop(f.path(), 4096);
  if (loop.path().empty()) GTEST_SKIP() << "no loop device: " << loop.why_not();
  backing_file b(loop.path(), direct_io::off);
  if (b.logical_block_size() != 4096)
    GTEST_SKIP() << "losetup -b 4096 gave " << b.logical_block_size() << "-byte blocks";
  options o = small_options(1, direct_io::on);
  o.line_size = 512;
  try {
    array<std::uint64_t> a(loop.path(), 0, o);
    FAIL() << "512-byte lines over 4096-byte logical blocks accepted under O_DIRECT";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "4096-byte logical blocks")) << e.what();
    EXPECT_TRUE(contains(e.what(), "WARPSTORE_LINE_SIZE")) << e.what();
  }
  o.line_size = 4096;
  array<std::uint64_t> a(loop.path(), 0, o);
  EXPECT_EQ(a.ref()[1000], tools::pattern_word(8000));
}

namespace {

// Reads the whole file (it lands in the page cache) or drops its pages.
void warm(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<char> buf(1 << 20);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
}
void drop(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

// direct=auto reads a file that is in the page cache through the page cache
// (O_DIRECT would send every read to the device), and one that is not with
// O_DIRECT where the filesystem allows it.
TEST(BackingFile, AutomaticFollowsThePageCache) {
  test::pattern_file f(8 << 20);
  warm(f.path());
  backing_file cached(f.path(), direct_io::automatic);
  EXPECT_FALSE(cached.direct()) << "resident share " << cached.resident_share();
  if (cached.resident_share() < 0) GTEST_SKIP() << "the filesystem refuses O_DIRECT";
  EXPECT_GE(cached.resident_share(), 0.5);

  drop(f.path());
  backing_file cold(f.path(), direct_io::automatic);
  if (cold.resident_share() >= 0.5)
    GTEST_SKIP() << "the pages stay resident after POSIX_FADV_DONTNEED (tmpfs?)";
  EXPECT_TRUE(cold.direct()) << "resident share " << cold.resident_share();
  // Explicit modes are honoured whatever the page cache holds.
  warm(f.path());
  EXPECT_TRUE(backing_file(f.path(), direct_io::on).direct());
  EXPECT_FALSE(backing_file(f.path(), direct_io::off).direct());
}
