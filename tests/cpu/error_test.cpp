// One base for every error: whatever goes wrong (a bad path, an index out of
// range, a failed or stalled command, a bad setting, a call out of order, a
// file that is not a log) is caught as warpstore::error with the fields the
// thrower knew, and still as the standard exception it was before.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include "controller/fault_policy.h"
#include "controller/host_controller.h"
#include "test_files.h"
#include "warpstore/array.cuh"
#include "warpstore/durable/checkpoint.cuh"
#include "warpstore/durable/log.cuh"

using namespace warpstore;

namespace {

// Each error is one std::exception (catch (const std::exception&) must still
// match: a second std::exception base would make it ambiguous) and one
// warpstore::error.
template <class E, class Std>
constexpr bool one_of_each = std::is_base_of_v<error, E>&& std::is_base_of_v<Std, E>&&
    std::is_convertible_v<E*, std::exception*>&& std::is_convertible_v<E*, error*>;
static_assert(one_of_each<io_error, std::runtime_error>);
static_assert(one_of_each<index_error, io_error>);
static_assert(one_of_each<file_error, std::system_error>);
static_assert(one_of_each<invalid_argument, std::invalid_argument>);
static_assert(one_of_each<logic_error, std::logic_error>);
static_assert(one_of_each<runtime_error, std::runtime_error>);
static_assert(one_of_each<checkpoint_error, std::runtime_error>);
static_assert(one_of_each<durable::log_error, std::runtime_error>);
static_assert(!std::is_base_of_v<std::exception, error>);

options small_options() {
  return test::small_cache_options(256 << 10);
}

// Runs `f`, which must throw; returns the error's fields and message, caught
// as warpstore::error (and checks std::exception sees the same message).
template <class F>
std::optional<std::pair<error_info, std::string>> caught(F&& f) {
  try {
    f();
  } catch (const error& e) {
    try {
      throw;
    } catch (const std::exception& s) {
      EXPECT_STREQ(s.what(), e.what()) << "what() differs through the two bases";
    }
    return std::make_pair(e.info(), std::string(e.what()));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a warpstore::error: " << e.what();
  }
  return std::nullopt;
}

// An array over the host controller whose controller fails `plan`.
struct faulty_array {
  std::unique_ptr<array<std::uint64_t>> a;
  faulty_array(const std::string& path, const options& o, fault_plan plan) {
    auto faults = std::make_shared<planned_faults>(std::move(plan));
    auto file = std::make_shared<backing_file>(path, direct_io::off);
    auto ctl = std::make_shared<host_controller>(file, o, o.line_size, faults);
    a = std::make_unique<array<std::uint64_t>>(std::make_shared<warpstore::cache>(o), ctl, 0, 0, o);
  }
};

constexpr std::uint64_t per_line = 4096 / 8;

}  // namespace

TEST(Errors, KindsHaveNames) {
  EXPECT_STREQ(to_string(error_kind::io), "io");
  EXPECT_STREQ(to_string(error_kind::index_out_of_range), "index_out_of_range");
  EXPECT_STREQ(to_string(error_kind::deadline), "deadline");
  EXPECT_STREQ(to_string(error_kind::file), "file");
  EXPECT_STREQ(to_string(error_kind::invalid_argument), "invalid_argument");
  EXPECT_STREQ(to_string(error_kind::invalid_state), "invalid_state");
  EXPECT_STREQ(to_string(error_kind::corrupt), "corrupt");
  EXPECT_STREQ(to_string(error_kind::no_space), "no_space");
  EXPECT_STREQ(to_string(error_kind::runtime), "runtime");
  EXPECT_STREQ(to_string(error_kind::cancelled), "cancelled");
  EXPECT_EQ(kind_of(nvme::status::ok()), error_kind::none);
  EXPECT_EQ(kind_of(nvme::status::deadline()), error_kind::deadline);
  EXPECT_EQ(kind_of(nvme::status::make(nvme::status_type::media, nvme::sc::unrecovered_read)),
            error_kind::io);
}

TEST(Errors, MissingFileIsAFileErrorWithPathAndErrno) {
  test::scratch_file missing("errors-missing");
  const auto r = caught([&] { array<std::uint64_t> a(missing.path, 0, small_options()); });
  ASSERT_TRUE(r);
  const error_info& i = r->first;
  EXPECT_EQ(i.kind, error_kind::file);
  EXPECT_EQ(i.path, missing.path);
  EXPECT_EQ(i.sys_errno, ENOENT);
  EXPECT_FALSE(i.index);
  EXPECT_FALSE(i.lba);
  EXPECT_TRUE(i.status.success());
  EXPECT_NE(r->second.find(missing.path), std::string::npos) << r->second;
  // Still what it was: a std::system_error carrying errno.
  try {
    array<std::uint64_t> a(missing.path, 0, small_options());
    FAIL() << "opened a missing file";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENOENT);
  }
}

TEST(Errors, DirectoryIsAnInvalidArgumentWithItsPath) {
  test::temp_dir dir("errors-dir");
  const auto r = caught([&] { array<std::uint64_t> a(dir.path, 0, small_options()); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first.kind, error_kind::invalid_argument);
  EXPECT_EQ(r->first.path, dir.path);
  EXPECT_NE(r->second.find("is a directory"), std::string::npos) << r->second;
  EXPECT_THROW(array<std::uint64_t>(dir.path, 0, small_options()), std::invalid_argument);
}

TEST(Errors, OffsetPastTheEndNamesTheOffset) {
  test::pattern_file file(64 << 10);
  const auto r = caught([&] {
    array<std::uint64_t> a(std::make_shared<warpstore::cache>(small_options()),
                           make_controller(file.path(), small_options()), 0, 1 << 20,
                           small_options());
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first.kind, error_kind::invalid_argument);
  EXPECT_EQ(r->first.path, file.path());
  EXPECT_EQ(r->first.offset, std::optional<std::uint64_t>(1 << 20));
}

TEST(Errors, BadSettingIsAnInvalidArgumentWithoutAPath) {
  options o = small_options();
  o.line_size = 3000;
  const auto r = caught([&] { o.validate(); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first.kind, error_kind::invalid_argument);
  EXPECT_EQ(r->first.path, "");
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

TEST(Errors, OutOfRangeIndexHasItsIndexAndNoLba) {
  test::pattern_file file(1 << 20);
  array<std::uint64_t> a(file.path(), 1000, small_options());
  EXPECT_EQ(a.ref()[1234], 0u);
  const auto r = caught([&] { a.check(); });
  ASSERT_TRUE(r);
  const error_info& i = r->first;
  EXPECT_EQ(i.kind, error_kind::index_out_of_range);
  EXPECT_EQ(i.path, file.path());
  EXPECT_EQ(i.index, std::optional<std::uint64_t>(1234));
  EXPECT_FALSE(i.lba);  // no command was issued
  EXPECT_FALSE(i.offset);
  EXPECT_EQ(i.status.code(), nvme::sc::index_out_of_range);
  EXPECT_EQ(i.count, 1u);
  EXPECT_NE(r->second.find("index 1234 out of range"), std::string::npos) << r->second;
}

TEST(Errors, InjectedReadErrorHasPathIndexLbaOffsetAndStatus) {
  test::pattern_file file(8 << 20);
  const std::uint64_t bad_line = 13;
  fault_plan plan;
  plan.kind = fault_kind::io_error;
  plan.lbas = {bad_line * 8 + 3};
  faulty_array f(file.path(), small_options(), plan);
  EXPECT_EQ(f.a->ref()[bad_line * per_line + 7], 0u);
  const auto r = caught([&] { f.a->check(); });
  ASSERT_TRUE(r);
  const error_info& i = r->first;
  EXPECT_EQ(i.kind, error_kind::io);
  EXPECT_EQ(i.path, file.path());
  EXPECT_EQ(i.index, std::optional<std::uint64_t>(bad_line * per_line + 7));
  EXPECT_EQ(i.lba, std::optional<std::uint64_t>(bad_line * 8));
  EXPECT_EQ(i.offset, std::optional<std::uint64_t>(bad_line * 4096));
  EXPECT_EQ(i.status.type(), nvme::status_type::media);
  EXPECT_EQ(i.status.code(), nvme::sc::unrecovered_read);
  EXPECT_NE(r->second.find("byte " + std::to_string(bad_line * 4096)), std::string::npos)
      << r->second;
  // io_error's own accessors agree.
  EXPECT_EQ(f.a->ref()[bad_line * per_line], 0u);
  try {
    f.a->check();
    FAIL() << "no error raised";
  } catch (const io_error& e) {
    EXPECT_EQ(e.lba(), bad_line * 8);
    EXPECT_EQ(e.index(), bad_line * per_line);
    EXPECT_EQ(e.status().raw, i.status.raw);
  }
}

TEST(Errors, StalledReadIsADeadlineWithItsLba) {
  test::pattern_file file(1 << 20);
  options o = small_options();
  o.timeout_ns = 300'000'000ull;
  fault_plan plan;
  plan.kind = fault_kind::stall;
  plan.lbas = {40 * 8};
  faulty_array f(file.path(), o, plan);
  EXPECT_EQ(f.a->ref()[40 * per_line], 0u);
  const auto r = caught([&] { f.a->check(); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first.kind, error_kind::deadline);
  EXPECT_EQ(r->first.lba, std::optional<std::uint64_t>(40 * 8));
  EXPECT_TRUE(r->first.status.is_deadline());
  EXPECT_EQ(r->first.path, file.path());
}

TEST(Errors, WriteToReadOnlyArrayHasNoLba) {
  test::pattern_file file(1 << 20);
  array<std::uint64_t> a(file.path(), 0, small_options());
  a.ref().store(5, 1);
  const auto r = caught([&] { a.check(); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first.kind, error_kind::io);
  EXPECT_EQ(r->first.index, std::optional<std::uint64_t>(5));
  EXPECT_FALSE(r->first.lba);
  EXPECT_EQ(r->first.status.code(), nvme::sc::namespace_write_protected);
}

TEST(Errors, NotALogIsCorruptWithItsPath) {
  test::pattern_file file(1 << 20);
  options o = small_options();
  o.writable = true;
  const auto r = caught([&] { durable::write_ahead_log log(make_controller(file.path(), o), o); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first.kind, error_kind::corrupt);
  EXPECT_EQ(r->first.path, file.path());
  EXPECT_NE(r->second.find("not a warpstore log"), std::string::npos) << r->second;
}

TEST(Errors, AppendBeforeRecoveryIsInvalidState) {
  const std::string path = test::temp_path("errors-log");
  options o = small_options();
  o.writable = true;
  durable::log_layout layout;
  layout.regions = 2;
  layout.region_bytes = 64 << 10;
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(layout.file_bytes())), 0);
  durable::write_ahead_log::format(*make_controller(path, o), layout);
  durable::write_ahead_log log(make_controller(path, o), o);
  const auto r = caught([&] { log.host_append(durable::log_entry{}); });
  ::unlink(path.c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first.kind, error_kind::invalid_state);
  EXPECT_EQ(r->first.path, path);
  EXPECT_THROW(log.host_append(durable::log_entry{}), std::logic_error);
}

TEST(Errors, RuntimeErrorCarriesWhatItIsGiven) {
  const auto plain = caught([] { throw runtime_error("broken"); });
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->first.kind, error_kind::runtime);
  const auto with = caught([] { throw runtime_error("write failed", file_info("/x", EIO, 4096)); });
  ASSERT_TRUE(with);
  EXPECT_EQ(with->first.kind, error_kind::file);
  EXPECT_EQ(with->first.path, "/x");
  EXPECT_EQ(with->first.sys_errno, EIO);
  EXPECT_EQ(with->first.offset, std::optional<std::uint64_t>(4096));
}

TEST(ErrorText, NvmeStatusesAreNamed) {
  using nvme::status;
  using nvme::status_type;
  const auto text = [](status_type t, std::uint8_t c) { return describe(status::make(t, c)); };
  EXPECT_NE(text(status_type::generic, nvme::sc::prp_offset_invalid).find("PRP offset invalid"),
            std::string::npos);
  EXPECT_NE(text(status_type::generic, nvme::sc::namespace_not_ready).find("namespace not ready"),
            std::string::npos);
  EXPECT_NE(text(status_type::command_specific, nvme::sc::invalid_queue_identifier)
                .find("invalid queue identifier"),
            std::string::npos);
  EXPECT_NE(text(status_type::vendor, nvme::sc::no_victim).find("no cache line free"),
            std::string::npos);
  EXPECT_NE(text(status_type::generic, 0x7E).find("generic error (sct 0x0, sc 0x7e)"),
            std::string::npos);
}

// A wait that gave up while its cache set kept changing says so, and what to
// change; a plain deadline does not.
TEST(ErrorText, StarvedWaitSaysItsSetKeptChanging) {
  EXPECT_NE(describe(nvme::status::starved()).find("while its set kept changing"),
            std::string::npos);
  const auto what = [](nvme::status st) {
    error_record rec{};
    rec.record(error_kind::deadline, 0, st, 7, 56);
    try {
      raise_recorded(rec, "/data/f");
    } catch (const io_error& e) {
      EXPECT_EQ(e.kind(), error_kind::deadline);
      EXPECT_EQ(e.status().raw, st.raw);
      return std::string(e.what());
    }
    return std::string("nothing raised");
  };
  const std::string starved = what(nvme::status::starved());
  EXPECT_NE(starved.find("deadline exceeded reading element 7"), std::string::npos) << starved;
  EXPECT_NE(starved.find("kept changing for the whole wait (16 deadlines)"), std::string::npos)
      << starved;
  EXPECT_NE(starved.find("a larger cache, or a longer deadline"), std::string::npos) << starved;
  EXPECT_EQ(what(nvme::status::deadline()).find("kept changing"), std::string::npos);
}

// A deadline is no progress for that long: it expires one timeout after the
// work ahead last moved, and at the latest max_extension timeouts after the
// first check however the work moves (then capped() says it was still
// moving).
TEST(Deadline, ExpiresOneTimeoutAfterTheLastProgress) {
  using clock = std::chrono::steady_clock;
  constexpr std::uint64_t timeout_ns = 20'000'000;
  const auto run = [&](auto&& progress_at) {
    detail::deadline dl(timeout_ns);
    const auto t0 = clock::now();
    for (;;) {
      const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      if (dl.expired(progress_at(ms))) return std::pair{ms, dl.capped()};
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  };
  // Nothing moves: one timeout.
  const auto [still, still_capped] = run([](double) { return std::uint64_t{0}; });
  EXPECT_GE(still, 20.0);
  EXPECT_LT(still, 20.0 + 100.0);
  EXPECT_FALSE(still_capped);
  // The work moves every millisecond for 60 ms, then stops: a timeout after.
  const auto [stopped, stopped_capped] =
      run([](double ms) { return static_cast<std::uint64_t>(std::min(ms, 60.0)); });
  EXPECT_GE(stopped, 60.0 + 20.0 - 2.0);
  EXPECT_LT(stopped, 60.0 + 20.0 + 100.0);
  EXPECT_FALSE(stopped_capped);
  // The work moves all along: max_extension timeouts, then capped.
  const auto [moving, moving_capped] = run([](double ms) { return static_cast<std::uint64_t>(ms); });
  const double cap_ms = 20.0 * detail::deadline::max_extension;
  EXPECT_GE(moving, cap_ms);
  EXPECT_LT(moving, cap_ms + 100.0);
  EXPECT_TRUE(moving_capped);
}

// A wait is overdue (claims priority for a cache line) once it has lasted a
// quarter of its timeout, as of the clock's last reading.
TEST(Deadline, OverdueAfterAQuarterTimeout) {
  detail::deadline dl(40'000'000);
  const auto check_once = [&] {  // the clock is read on the 1st, 65th, ... call
    bool expired = false;
    for (int i = 0; i < 64; ++i) expired = dl.expired(0) || expired;
    return expired;
  };
  EXPECT_FALSE(check_once());
  EXPECT_FALSE(dl.overdue());
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_FALSE(check_once());
  EXPECT_FALSE(dl.overdue());
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(check_once());
  EXPECT_TRUE(dl.overdue());
  EXPECT_FALSE(dl.capped());
}
