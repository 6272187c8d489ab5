// Several writers of one file: each writable array locks the bytes it may
// write back (array_base::write_footprint, whole cache lines), so writers
// with disjoint footprints run side by side and one that overlaps another is
// refused at open with a message naming both byte ranges.
//
// The second process is this test binary run again (posix_spawn of
// /proc/self/exe, filtered to MultiWriterChild.Run, told what to do through
// the environment): a fresh process, nothing inherited from the parent's
// threads or descriptors (they are O_CLOEXEC), as another program would be.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_files.h"
#include "warpstore/array.cuh"

extern char** environ;

using namespace warpstore;

namespace {

constexpr std::uint64_t file_bytes = 256 << 10;  // 64 lines of 4 KiB
constexpr std::uint64_t words = file_bytes / 8;
// Two writers: rows [0, half_rows) and [half_rows, words), 32 lines each.
constexpr std::uint64_t half_rows = words / 2;
constexpr int child_done = 42;  // the child's exit status when its body ran and passed

options writer_options(std::uint32_t line_size = 4096, bool writable = true) {
  // 16 lines: most lines are written back on eviction.
  options o = test::small_cache_options(64 << 10, controller_kind::automatic);
  o.writable = writable;
  o.line_size = line_size;
  o.service_threads = 1;
  o.queue_pairs = 1;
  return o;
}

// What writer `seed` stores at row i.
std::uint64_t value(std::uint64_t seed, std::uint64_t i) {
  return tools::pattern_word(i * 8, seed);
}

// Stores value(seed, first + k) at element k of `a`, every element.
void store_all(array<std::uint64_t>& a, std::uint64_t first, std::uint64_t seed) {
  const array_ref<std::uint64_t> ref = a.ref();
  for (std::uint64_t k = 0; k < ref.size(); ++k) ref.store(k, value(seed, first + k));
  a.check();
}

// Rows of the file at `path` that differ from want(i).
template <class Want>
std::uint64_t mismatches(const std::string& path, Want&& want) {
  return test::file_mismatches(path, words, want);
}

std::uint64_t original(std::uint64_t i) {
  return tools::pattern_word(i * 8);
}

// The writable array over rows [first, first + rows) (its own cache and
// controller), or the message of the invalid_argument that refused it.
struct open_result {
  std::optional<array<std::uint64_t>> a;
  std::string refused;
  std::optional<std::uint64_t> offset;
};
open_result open_rows(const std::string& path, std::uint64_t first, std::uint64_t rows,
                      const options& o = writer_options()) {
  open_result r;
  try {
    r.a.emplace(path, rows, o, first * 8);
  } catch (const warpstore::invalid_argument& e) {
    r.refused = e.what();
    r.offset = e.offset();
    EXPECT_EQ(e.kind(), error_kind::invalid_argument);
    EXPECT_EQ(e.path(), path);
  }
  return r;
}

// ---- the child ----------------------------------------------------------------

std::uint64_t env_u64(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : 0;
}

// Runs this binary's MultiWriterChild.Run with `vars` ("NAME=value") added
// to the environment; returns its exit status (-1: it did not exit by
// itself within 60 s, or could not start).
class child_process {
 public:
  explicit child_process(const std::vector<std::string>& vars) {
    std::vector<std::string> env = vars;
    for (char** e = environ; *e != nullptr; ++e)
      if (std::string(*e).rfind("WARPSTORE_MW_", 0) != 0) env.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", filter = "--gtest_filter=MultiWriterChild.Run";
    char* argv[] = {exe.data(), filter.data(), nullptr};
    if (::posix_spawn(&pid_, exe.c_str(), nullptr, nullptr, argv, envp.data()) != 0) pid_ = -1;
  }
  ~child_process() { (void)wait(); }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  // Kills the child (SIGKILL) and reaps it: when this returns, the process
  // is gone.
  void kill() {
    if (pid_ < 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

  int wait() {
    if (pid_ < 0) return status_;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int st = 0;
    pid_t r;
    while ((r = ::waitpid(pid_, &st, WNOHANG)) == 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (r == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      st = -1;
    }
    status_ = r == pid_ && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    pid_ = -1;
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
};

std::vector<std::string> child_vars(const std::string& mode, const std::string& path,
                                    std::uint64_t first, std::uint64_t rows, std::uint64_t seed = 0,
                                    const std::string& expect = {}) {
  return {"WARPSTORE_MW_MODE=" + mode,
          "WARPSTORE_MW_PATH=" + path,
          "WARPSTORE_MW_FIRST=" + std::to_string(first),
          "WARPSTORE_MW_ROWS=" + std::to_string(rows),
          "WARPSTORE_MW_SEED=" + std::to_string(seed),
          "WARPSTORE_MW_EXPECT=" + expect};
}

}  // namespace

// The other process. mode "write": open rows [FIRST, FIRST + ROWS) writable,
// store value(SEED, row) in each, flush. mode "conflict": that open must be
// refused with a message containing each '|'-separated piece of EXPECT.
// Exits child_done when it ran and passed. mode "hold": open and store as
// "write" does, create the file EXPECT names, then wait to be killed.
TEST(MultiWriterChild, Run) {
  const char* mode = std::getenv("WARPSTORE_MW_MODE");
  if (mode == nullptr) GTEST_SKIP() << "runs only as the second process of MultiWriter tests";
  const std::string path = std::getenv("WARPSTORE_MW_PATH");
  const std::uint64_t first = env_u64("WARPSTORE_MW_FIRST"), rows = env_u64("WARPSTORE_MW_ROWS");
  {
    open_result r = open_rows(path, first, rows);
    if (std::string(mode) == "write") {
      ASSERT_TRUE(r.a) << r.refused;
      EXPECT_TRUE(r.a->write_locked());
      store_all(*r.a, first, env_u64("WARPSTORE_MW_SEED"));
      r.a->flush();
    } else if (std::string(mode) == "hold") {
      ASSERT_TRUE(r.a) << r.refused;
      store_all(*r.a, first, env_u64("WARPSTORE_MW_SEED"));
      const int fd = ::open(std::getenv("WARPSTORE_MW_EXPECT"), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
      ASSERT_GE(fd, 0);
      ::close(fd);
      for (;;) ::pause();  // until the parent's SIGKILL
    } else {
      EXPECT_FALSE(r.a) << "opened over bytes another process holds";
      std::string expect = std::getenv("WARPSTORE_MW_EXPECT");
      for (std::size_t at = 0; at <= expect.size();) {
        const std::size_t bar = std::min(expect.find('|', at), expect.size());
        const std::string piece = expect.substr(at, bar - at);
        EXPECT_NE(r.refused.find(piece), std::string::npos)
            << "'" << piece << "' not in: " << r.refused;
        at = bar + 1;
      }
    }
  }
  std::fflush(stdout);
  std::_Exit(::testing::Test::HasFailure() ? 1 : child_done);
}

// ---- two processes ------------------------------------------------------------

// Each process writes its half of the file's rows (32 whole lines each),
// both arrays open at once and writing back lines as their small caches
// evict them; the file ends up with exactly each one's values in its half.
TEST(MultiWriter, TwoProcessesWriteDisjointLineAlignedRanges) {
  test::pattern_file file(file_bytes);
  open_result mine = open_rows(file.path(), 0, half_rows);
  ASSERT_TRUE(mine.a) << mine.refused;
  if (!mine.a->write_locked()) GTEST_SKIP() << "no OFD locks under $TMPDIR";
  EXPECT_EQ(mine.a->write_footprint().first, 0u);
  EXPECT_EQ(mine.a->write_footprint().end, half_rows * 8);
  child_process child(child_vars("write", file.path(), half_rows, words - half_rows, 2));
  store_all(*mine.a, 0, 1);  // while the child writes the other half_rows
  mine.a->flush();
  EXPECT_EQ(child.wait(), child_done);
  mine.a.reset();
  EXPECT_EQ(mismatches(file.path(),
                       [](std::uint64_t i) { return i < half_rows ? value(1, i) : value(2, i); }),
            0u);
}

// A second process asking for rows that overlap the first's is refused at
// open, told the file, both byte ranges and the line size; it writes
// nothing, and the first writer's rows all reach the file.
TEST(MultiWriter, OverlappingRangeInAnotherProcessIsRefused) {
  test::pattern_file file(file_bytes);
  open_result mine = open_rows(file.path(), 0, half_rows);
  ASSERT_TRUE(mine.a) << mine.refused;
  if (!mine.a->write_locked()) GTEST_SKIP() << "no OFD locks under $TMPDIR";
  store_all(*mine.a, 0, 1);
  // Rows [half_rows / 2, half_rows / 2 + half_rows): bytes [65536, 196608).
  const std::uint64_t first = half_rows / 2;
  child_process child(child_vars(
      "conflict", file.path(), first, half_rows, 0,
      file.path() + ": bytes [65536, 196608) cannot be opened for writing|another writer holds "
                    "bytes [0, 131072)|another process|line size 4096 bytes"));
  EXPECT_EQ(child.wait(), child_done);
  mine.a->flush();
  mine.a.reset();
  EXPECT_EQ(mismatches(file.path(),
                       [](std::uint64_t i) { return i < half_rows ? value(1, i) : original(i); }),
            0u);
}

// ---- one process, arrays with controllers of their own ------------------------

// Same refusal within one process: each array(path, ...) opens the file
// anew, and OFD locks of different open file descriptions conflict.
TEST(MultiWriter, OverlappingRangeInThisProcessIsRefused) {
  test::pattern_file file(file_bytes);
  open_result a = open_rows(file.path(), 0, half_rows);
  ASSERT_TRUE(a.a) << a.refused;
  if (!a.a->write_locked()) GTEST_SKIP() << "no OFD locks under $TMPDIR";
  // 2 lines in a's half, 2 past it.
  open_result b = open_rows(file.path(), half_rows - 1024, 2048);
  ASSERT_FALSE(b.a);
  EXPECT_EQ(b.refused,
            file.path() +
                ": bytes [122880, 139264) cannot be opened for writing: another writer holds "
                "bytes [0, 131072) (another process, or a writable array of this process with a "
                "controller of its own). This array (2048 elements of 8 bytes at byte offset "
                "122880) writes back whole 4096-byte cache lines, so it writes bytes "
                "[122880, 139264). Give each writer its own bytes: start each writer at or after "
                "the end of the previous writer's last cache line (line size 4096 bytes), e.g. "
                "split the rows at multiples of 4096 bytes from the first writer's byte offset");
  EXPECT_EQ(b.offset, 122880u);  // the first byte both want
}

// Rows split inside a cache line: 576 rows of 8 bytes are 4608 bytes, so the
// first writer's last 4 KiB line runs to byte 8192 and the second writer,
// from byte 4608, would rewrite rows of it. With 512-byte lines the same
// split is clean.
TEST(MultiWriter, RowsSharingACacheLineConflict) {
  test::pattern_file file(file_bytes);
  {
    open_result a = open_rows(file.path(), 0, 576);
    ASSERT_TRUE(a.a) << a.refused;
    if (!a.a->write_locked()) GTEST_SKIP() << "no OFD locks under $TMPDIR";
    EXPECT_EQ(a.a->write_footprint().end, 8192u);
    open_result b = open_rows(file.path(), 576, 576);
    ASSERT_FALSE(b.a);
    EXPECT_NE(b.refused.find("bytes [4608, 12800) cannot be opened for writing"), std::string::npos)
        << b.refused;
    EXPECT_NE(b.refused.find("another writer holds bytes [0, 8192)"), std::string::npos)
        << b.refused;
    EXPECT_NE(b.refused.find("writes back whole 4096-byte cache lines"), std::string::npos)
        << b.refused;
    EXPECT_NE(b.refused.find("line size 4096 bytes"), std::string::npos) << b.refused;
  }
  open_result a = open_rows(file.path(), 0, 576, writer_options(512));
  open_result b = open_rows(file.path(), 576, 576, writer_options(512));
  ASSERT_TRUE(a.a) << a.refused;
  ASSERT_TRUE(b.a) << b.refused;
  EXPECT_EQ(a.a->write_footprint().end, 4608u);
  EXPECT_EQ(b.a->write_footprint().first, 4608u);
  store_all(*a.a, 0, 1);
  store_all(*b.a, 576, 2);
  a.a->flush();
  b.a->flush();
  EXPECT_EQ(mismatches(file.path(),
                       [](std::uint64_t i) {
                         return i < 576 ? value(1, i) : i < 1152 ? value(2, i) : original(i);
                       }),
            0u);
}

// The memory controller writes back whole 64 KiB chunks of the file: its
// footprint, and the conflict, cover them.
TEST(MultiWriter, MemoryControllerLocksWholeChunks) {
  test::pattern_file file(file_bytes);
  options o = writer_options();
  o.controller = controller_kind::memory;
  open_result a = open_rows(file.path(), 512, 512, o);  // bytes [4096, 8192)
  ASSERT_TRUE(a.a) << a.refused;
  if (!a.a->write_locked()) GTEST_SKIP() << "no OFD locks under $TMPDIR";
  EXPECT_EQ(a.a->write_footprint().first, 0u);
  EXPECT_EQ(a.a->write_footprint().end, 65536u);
  open_result b = open_rows(file.path(), 2048, 512);  // bytes [16384, 20480), host controller
  ASSERT_FALSE(b.a);
  EXPECT_NE(b.refused.find("another writer holds bytes [0, 65536)"), std::string::npos)
      << b.refused;
  open_result c = open_rows(file.path(), 1024, 512, o);  // bytes [8192, 12288): in a's chunk
  ASSERT_FALSE(c.a);
  EXPECT_NE(c.refused.find("and its memory controller whole 65536-byte chunks of the file"),
            std::string::npos)
      << c.refused;
  open_result d = open_rows(file.path(), 8192, 512, o);  // bytes [65536, 69632): the next chunk
  EXPECT_TRUE(d.a) << d.refused;
}

// Readers take no lock: a read-only array over bytes a writer holds opens
// and reads what the file holds.
TEST(MultiWriter, ReadOnlyArrayOpensOverAWritersRange) {
  test::pattern_file file(file_bytes);
  open_result w = open_rows(file.path(), 0, half_rows);
  ASSERT_TRUE(w.a) << w.refused;
  if (!w.a->write_locked()) GTEST_SKIP() << "no OFD locks under $TMPDIR";
  store_all(*w.a, 0, 1);
  w.a->flush();
  array<std::uint64_t> r(file.path(), 0, writer_options(4096, false));
  EXPECT_FALSE(r.write_locked());
  const array_ref<std::uint64_t> ref = r.ref();
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < words; ++i)
    bad += ref[i] != (i < half_rows ? value(1, i) : original(i));
  r.check();
  EXPECT_EQ(bad, 0u);
}

// The lock goes with the array: once the first writer is gone, its rows can
// be taken again.
TEST(MultiWriter, RangeIsFreeAgainOnceTheWriterIsGone) {
  test::pattern_file file(file_bytes);
  open_result a = open_rows(file.path(), 0, half_rows);
  ASSERT_TRUE(a.a) << a.refused;
  if (!a.a->write_locked()) GTEST_SKIP() << "no OFD locks under $TMPDIR";
  store_all(*a.a, 0, 1);
  EXPECT_FALSE(open_rows(file.path(), 0, half_rows).a);
  a.a.reset();  // flushes, then unlocks
  open_result b = open_rows(file.path(), 0, half_rows);
  ASSERT_TRUE(b.a) << b.refused;
  EXPECT_TRUE(b.a->write_locked());
  // Another process too.
  b.a.reset();
  child_process child(child_vars("write", file.path(), 0, half_rows, 2));
  EXPECT_EQ(child.wait(), child_done);
  EXPECT_EQ(mismatches(file.path(),
                       [](std::uint64_t i) { return i < half_rows ? value(2, i) : original(i); }),
            0u);
}

// A writer killed with SIGKILL leaves its bytes free by the time it is
// reaped, so a program restarted after a crash can open them at once. The
// lock must not live on a file description the io_uring holds: the kernel
// tears a dead process's rings down after it exits, and registered files
// (and reads in flight) keep their description, and its locks, until then
// (the crash trials' recoveries were refused that way).
TEST(MultiWriter, RangeIsFreeOnceAKilledWriterIsReaped) {
  test::pattern_file file(file_bytes);
  {
    open_result probe = open_rows(file.path(), 0, half_rows);
    ASSERT_TRUE(probe.a) << probe.refused;
    if (!probe.a->write_locked()) GTEST_SKIP() << "no OFD locks under $TMPDIR";
  }
  const std::string ready = file.path() + ".ready";
  for (int trial = 0; trial < 10; ++trial) {
    ::unlink(ready.c_str());
    child_process child(child_vars("hold", file.path(), 0, half_rows, 2, ready));
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (::access(ready.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_EQ(::access(ready.c_str(), F_OK), 0) << "the child never opened its array";
    child.kill();
    open_result again = open_rows(file.path(), 0, half_rows);
    ASSERT_TRUE(again.a) << "trial " << trial << ": " << again.refused;
    EXPECT_TRUE(again.a->write_locked());
  }
  ::unlink(ready.c_str());
}

// Arrays sharing one controller share its open file description: they do
// not exclude one another, and the bytes stay locked until the last array
// covering them is gone.
TEST(MultiWriter, ArraysSharingAControllerShareItsLock) {
  test::pattern_file file(file_bytes);
  const options o = writer_options();
  auto ctl = make_controller(file.path(), o);
  auto c = std::make_shared<cache>(o);
  std::optional<array<std::uint64_t>> a, b;
  a.emplace(c, ctl, half_rows, 0, o);  // bytes [0, 131072)
  if (!a->write_locked()) GTEST_SKIP() << "no OFD locks under $TMPDIR";
  b.emplace(c, ctl, 1024, (half_rows - 512) * 8, o);  // bytes [126976, 135168): overlaps a
  EXPECT_TRUE(b->write_locked());
  a->flush();
  a.reset();  // b still covers [126976, 135168); the rest of a's bytes are free
  EXPECT_TRUE(open_rows(file.path(), 0, half_rows - 512).a);
  open_result x = open_rows(file.path(), half_rows - 512, 512);
  ASSERT_FALSE(x.a);
  EXPECT_NE(x.refused.find("another writer holds bytes [126976, 135168)"), std::string::npos)
      << x.refused;
  b->flush();
  b.reset();
  EXPECT_TRUE(open_rows(file.path(), 0, words).a);
}
