// The write-ahead log on the CPU target: std::thread lanes append to their
// own regions through the real controllers; recovery undoes what a "crash"
// (dropping the objects before the commit) left, detects torn tails, and can
// be stopped after any step and run again.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "test_files.h"
#include "write_cases.h"
#include "warpstore/durable/log.cuh"

using namespace warpstore;
using namespace warpstore::durable;

namespace {

struct setup {
  controller_kind kind;
  std::uint32_t line_size;
};

using test::temp_path;

void fill_file(const std::string& path, const std::vector<std::byte>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

std::vector<std::byte> read_whole(const std::string& path, std::uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return {};
  const ssize_t r = ::pread(fd, out.data(), bytes, 0);
  ::close(fd);
  if (r != static_cast<ssize_t>(bytes)) return {};
  return out;
}

std::byte payload_byte(std::uint64_t txn, std::uint32_t k, std::uint32_t i) {
  return static_cast<std::byte>((txn * 131 + k * 17 + i * 7 + 3) & 0xFF);
}

class Log : public ::testing::TestWithParam<setup> {
 protected:
  void SetUp() override {
    opts_.controller = GetParam().kind;
    opts_.line_size = GetParam().line_size;
    opts_.writable = true;
    opts_.service_threads = 2;
    opts_.queue_pairs = 2;
    opts_.queue_depth = 32;
    opts_.direct = direct_io::off;
    opts_.timeout_ns = 20'000'000'000ull;
    layout_.line_size = GetParam().line_size;
    layout_.regions = 4;
    layout_.region_bytes = 64 << 10;
    log_path_ = temp_path("log");
    data_path_ = temp_path("data");
    ASSERT_EQ(::truncate(log_path_.c_str(), static_cast<off_t>(layout_.file_bytes())), 0)
        << log_path_ << ": " << std::strerror(errno);
    data_ = std::vector<std::byte>(data_bytes);
    for (std::size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<std::byte>(i * 7 + 1);
    fill_file(data_path_, data_);
    auto ctl = make_controller(log_path_, opts_);
    write_ahead_log::format(*ctl, layout_);
  }
  void TearDown() override {
    ::unlink(log_path_.c_str());
    ::unlink(data_path_.c_str());
  }

  std::shared_ptr<controller> open(const std::string& p) { return make_controller(p, opts_); }

  // Transaction `txn` from lane `region`: logs the before-images of
  // `ranges` of the data file (what it holds now), makes them durable, then
  // overwrites those bytes with `value`; with `commit`, commits it and the
  // model (data_) moves on.
  void log_and_modify(write_ahead_log& log, const log_ref& ref, std::uint32_t region,
                      std::uint64_t txn,
                      const std::vector<std::pair<std::uint64_t, std::uint32_t>>& ranges,
                      std::byte value, bool commit) {
    std::vector<std::byte> now = read_whole(data_path_, data_bytes);
    ASSERT_EQ(now.size(), data_bytes);
    // One entry holds at most a line less its header: long ranges take several.
    const std::uint32_t most = layout_.line_size - 32;
    for (const auto& [off, n] : ranges)
      for (std::uint32_t k = 0; k < n; k += most) {
        log_entry e;
        e.kind = entry_kind::undo;
        e.txn = txn;
        e.target = off + k;
        e.payload = now.data() + off + k;
        e.payload_bytes = n - k < most ? n - k : most;
        ASSERT_TRUE(ref.append(1u, region, true, e));
      }
    ASSERT_TRUE(ref.write_tail(1u, region));
    ASSERT_TRUE(ref.flush(1u));
    log.flush();  // memory controller: the device FLUSH reached pinned memory only
    for (const auto& [off, n] : ranges)
      for (std::uint32_t i = 0; i < n; ++i) now[off + i] = value;
    fill_file(data_path_, now);
    if (commit) {
      ASSERT_TRUE(ref.commit(1u, region, txn));
      log.flush();
      data_ = now;
    }
  }

  // Entries log_and_modify takes for a range of n bytes.
  std::uint64_t pieces(std::uint64_t n) const {
    return (n + layout_.line_size - 33) / (layout_.line_size - 32);
  }

  static constexpr std::uint64_t data_bytes = 64 << 10;
  options opts_;
  log_layout layout_;
  std::string log_path_, data_path_;
  std::vector<std::byte> data_;  // what the data file must hold after recovery
};

}  // namespace

TEST_P(Log, AppendCommitScanRoundTrip) {
  auto ctl = open(log_path_);
  write_ahead_log log(ctl, opts_);
  const recovery_report first = log.recover(nullptr);
  EXPECT_TRUE(first.completed);
  EXPECT_EQ(first.entries, 0u);
  EXPECT_EQ(first.epoch_now, first.epoch_found + 1);
  const log_ref ref = log.ref();
  constexpr std::uint32_t txns = 12, per_txn = 5;
  test::run_lanes(layout_.regions, [&](unsigned lane) {
    std::vector<std::byte> payload(300);
    for (std::uint32_t t = 0; t < txns; ++t) {
      const std::uint64_t txn = lane * 1000 + t;
      for (std::uint32_t k = 0; k < per_txn; ++k) {
        const std::uint32_t n = 1 + (t * 37 + k * 53) % 200;
        for (std::uint32_t i = 0; i < n; ++i) payload[i] = payload_byte(txn, k, i);
        log_entry e;
        e.kind = entry_kind::record;
        e.txn = txn;
        e.target = k;
        e.payload = payload.data();
        e.payload_bytes = n;
        if (!ref.append(1u, lane, true, e)) return;
      }
      if (!ref.commit(1u, lane, txn, t + 1 == txns)) return;
    }
  });
  log.check();
  log.flush();
  std::uint32_t torn = 99;
  const std::vector<scanned_entry> entries = log.scan(&torn);
  EXPECT_EQ(torn, 0u);
  ASSERT_EQ(entries.size(), std::size_t{layout_.regions} * txns * (per_txn + 1));
  std::uint64_t bad = 0;
  std::size_t at = 0;
  for (std::uint32_t r = 0; r < layout_.regions; ++r)
    for (std::uint32_t t = 0; t < txns; ++t)
      for (std::uint32_t k = 0; k <= per_txn; ++k, ++at) {
        const scanned_entry& e = entries[at];
        const std::uint64_t txn = r * 1000 + t;
        bad += e.region != r || e.header.txn != txn;
        if (k == per_txn) {
          bad += e.header.kind != static_cast<std::uint8_t>(entry_kind::commit);
          continue;
        }
        const std::uint32_t n = 1 + (t * 37 + k * 53) % 200;
        bad += e.header.payload_bytes != n || e.header.target != k || e.payload.size() != n;
        for (std::uint32_t i = 0; i < n && i < e.payload.size(); ++i)
          bad += e.payload[i] != payload_byte(txn, k, i);
      }
  EXPECT_EQ(bad, 0u);
  const std::vector<std::uint64_t> tails = log.tails();
  EXPECT_EQ(tails[0], entries[txns * (per_txn + 1) - 1].pos + 32);  // the last commit's end

  // Reopened: every transaction committed, nothing to undo, the log emptied.
  write_ahead_log again(open(log_path_), opts_);
  EXPECT_EQ(again.epoch(), log.epoch());
  const recovery_report rep = again.recover(nullptr);
  EXPECT_EQ(rep.entries, entries.size());
  EXPECT_EQ(rep.committed_txns, std::uint64_t{layout_.regions} * txns);
  EXPECT_EQ(rep.partial_txns, 0u);
  EXPECT_EQ(rep.undone_entries, 0u);
  EXPECT_TRUE(again.scan().empty());
}

TEST_P(Log, HostCommitCoversEntriesOfManyRegions) {
  auto ctl = open(log_path_);
  write_ahead_log log(ctl, opts_);
  log.recover(nullptr);
  const log_ref ref = log.ref();
  test::run_lanes(layout_.regions, [&](unsigned lane) {
    log_entry e;
    e.txn = 5;
    e.target = lane;
    ref.append(1u, lane, true, e);
    ref.write_tail(1u, lane);
  });
  log.check();
  log.flush();
  log.commit(5);
  write_ahead_log again(open(log_path_), opts_);
  const recovery_report rep = again.recover(nullptr);
  EXPECT_EQ(rep.entries, layout_.regions + 1u);
  EXPECT_EQ(rep.committed_txns, 1u);
  EXPECT_EQ(rep.partial_txns, 0u);
}

TEST_P(Log, PartialTransactionIsUndone) {
  {
    write_ahead_log log(open(log_path_), opts_);
    log.recover(open(data_path_).get());
    const log_ref ref = log.ref();
    // Committed: stays. Partial (entries durable, data changed, no commit):
    // undone, newest first, so bytes txns 3 and 4 both wrote get their original.
    log_and_modify(log, ref, 0, 2, {{100, 50}, {5000, 700}}, std::byte{0xAA}, true);
    log_and_modify(log, ref, 1, 3, {{120, 100}, {9000, 64}}, std::byte{0xBB}, false);
    log_and_modify(log, ref, 1, 4, {{130, 10}, {40000, 3000}}, std::byte{0xCC}, false);
    log.check();
    // The crash: the objects go away without commit or truncation.
  }
  write_ahead_log log(open(log_path_), opts_);
  auto data = open(data_path_);
  const recovery_report rep = log.recover(data.get());
  EXPECT_TRUE(rep.completed);
  EXPECT_EQ(rep.committed_txns, 1u);
  EXPECT_EQ(rep.partial_txns, 2u);
  EXPECT_EQ(rep.undone_entries, pieces(100) + pieces(64) + pieces(10) + pieces(3000));
  ASSERT_EQ(rep.undone_txns.size(), 2u);
  EXPECT_EQ(rep.undone_txns[0], 4u);
  data.reset();
  EXPECT_TRUE(read_whole(data_path_, data_bytes) == data_) << "the data file is not the committed state";
  // Recovery is idempotent: the log is empty now, a second one changes nothing.
  write_ahead_log second(open(log_path_), opts_);
  const recovery_report rep2 = second.recover(open(data_path_).get());
  EXPECT_EQ(rep2.entries, 0u);
  EXPECT_TRUE(read_whole(data_path_, data_bytes) == data_);
}

TEST_P(Log, TornTailIsDetectedAndItsTransactionUndone) {
  std::uint64_t commit_pos = 0;
  std::vector<std::byte> after10;
  {
    write_ahead_log log(open(log_path_), opts_);
    log.recover(open(data_path_).get());
    const log_ref ref = log.ref();
    log_and_modify(log, ref, 2, 10, {{0, 200}}, std::byte{0x11}, true);
    after10 = data_;
    log_and_modify(log, ref, 2, 11, {{1000, 100}, {2000, 100}}, std::byte{0x22}, false);
    log.check();
    // Txn 12: entries and commit written, then its commit record is torn.
    log_and_modify(log, ref, 2, 12, {{3000, 40}}, std::byte{0x33}, true);
    log.check();
    const std::vector<scanned_entry> entries = log.scan();
    ASSERT_EQ(entries.size(), 6u);
    commit_pos = entries.back().pos;
    EXPECT_EQ(entries.back().header.kind, static_cast<std::uint8_t>(entry_kind::commit));
  }
  // Flip a byte of txn 12's commit record (its txn field) on storage.
  const std::uint64_t at = layout_.line_size * 2 + 2 * layout_.region_bytes + commit_pos + 16;
  const int fd = ::open(log_path_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  unsigned char b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(at)), 1);
  b ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(at)), 1);
  ::close(fd);
  // The model: txn 12 is undone like txn 11.
  const std::vector<std::byte> expect = after10;
  write_ahead_log log(open(log_path_), opts_);
  const recovery_report rep = log.recover(open(data_path_).get());
  EXPECT_EQ(rep.torn_regions, 1u);
  EXPECT_EQ(rep.entries, 5u);  // scanning stopped at the torn record
  EXPECT_EQ(rep.committed_txns, 1u);
  EXPECT_EQ(rep.partial_txns, 2u);
  EXPECT_TRUE(read_whole(data_path_, data_bytes) == expect);
}

TEST_P(Log, InterruptedRecoveryRerunEndsInTheSameState) {
  const recovery_step steps[] = {recovery_step::scanned, recovery_step::undo_written,
                                 recovery_step::undo_durable, recovery_step::superblock_written};
  for (const recovery_step stop : steps) {
    SCOPED_TRACE(static_cast<int>(stop));
    // A fresh crash image: one committed and one partial transaction.
    for (std::size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<std::byte>(i * 7 + 1);
    fill_file(data_path_, data_);
    write_ahead_log::format(*open(log_path_), layout_);
    {
      write_ahead_log log(open(log_path_), opts_);
      log.recover(open(data_path_).get());
      const log_ref ref = log.ref();
      log_and_modify(log, ref, 0, 1, {{64, 64}}, std::byte{0x5A}, true);
      log_and_modify(log, ref, 3, 2, {{64, 32}, {30000, 4000}}, std::byte{0xA5}, false);
      log.check();
    }
    {
      write_ahead_log log(open(log_path_), opts_);
      recovery_hooks h;
      h.stop_after = stop;
      const recovery_report rep = log.recover(open(data_path_).get(), h);
      EXPECT_FALSE(rep.completed);
      EXPECT_THROW(log.ref(), std::logic_error);
    }
    write_ahead_log log(open(log_path_), opts_);
    const recovery_report rep = log.recover(open(data_path_).get());
    EXPECT_TRUE(rep.completed);
    EXPECT_TRUE(read_whole(data_path_, data_bytes) == data_);
    // Once the new superblock was written (host and nvme controllers: in the
    // file; the memory controller lost it with its pinned copy) the log was
    // empty.
    const bool truncated =
        stop == recovery_step::superblock_written && GetParam().kind != controller_kind::memory;
    EXPECT_EQ(rep.entries, truncated ? 0u : 2 + pieces(32) + pieces(4000));
  }
}

TEST_P(Log, MisuseAndFullRegionsRaiseNamedErrors) {
  write_ahead_log log(open(log_path_), opts_);
  EXPECT_THROW(log.ref(), std::logic_error);
  log.recover(nullptr);
  const log_ref ref = log.ref();
  std::vector<std::byte> big(layout_.line_size);
  log_entry e;
  e.payload = big.data();
  e.payload_bytes = layout_.line_size;  // no room for the header
  EXPECT_FALSE(ref.append(1u, 0, true, e));
  try {
    log.check();
    ADD_FAILURE() << "no error for an entry larger than a line";
  } catch (const log_error& err) {
    EXPECT_NE(std::string(err.what()).find("does not fit"), std::string::npos) << err.what();
  }
  e.payload_bytes = layout_.line_size / 2;
  bool ok = true;
  for (std::uint64_t i = 0; i <= layout_.region_bytes / (e.payload_bytes + 32) && ok; ++i)
    ok = ref.append(1u, 1, true, e);
  EXPECT_FALSE(ok);
  try {
    log.check();
    ADD_FAILURE() << "no error for a full region";
  } catch (const log_error& err) {
    EXPECT_NE(std::string(err.what()).find("region 1"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("full"), std::string::npos) << err.what();
  }
  // Undo entries with no data file to apply them to.
  e.kind = entry_kind::undo;
  e.payload_bytes = 8;
  ASSERT_TRUE(ref.append(1u, 2, true, e));
  ASSERT_TRUE(ref.write_tail(1u, 2));
  log.flush();
  write_ahead_log again(open(log_path_), opts_);
  EXPECT_THROW(again.recover(nullptr), log_error);
  // Not a log at all.
  EXPECT_THROW(write_ahead_log(open(data_path_), opts_), log_error);
}

INSTANTIATE_TEST_SUITE_P(Controllers, Log,
                         ::testing::Values(setup{controller_kind::host, 4096},
                                           setup{controller_kind::host, 512},
                                           setup{controller_kind::memory, 4096},
                                           setup{controller_kind::nvme_model, 4096}),
                         [](const ::testing::TestParamInfo<setup>& i) {
                           return test::controller_test_name(i.param.kind) + "_" +
                                  std::to_string(i.param.line_size);
                         });
