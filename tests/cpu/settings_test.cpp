#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_files.h"
#include "warpstore/settings_table.h"

using namespace warpstore;

TEST(Settings, ParseSize) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("64K"), 65536u);
  EXPECT_EQ(parse_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_size("1.5g"), 3ull << 29);
  EXPECT_THROW(parse_size("lots"), std::invalid_argument);
  EXPECT_THROW(parse_size("3Q"), std::invalid_argument);
}

TEST(Settings, DefaultsAreValid) { EXPECT_NO_THROW(options{}.validate()); }

TEST(Settings, ValidationNamesTheSetting) {
  options o;
  o.line_size = 3000;
  try {
    o.validate();
    FAIL() << "line size 3000 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("line_size"), std::string::npos);
  }
  o = options{};
  o.queue_depth = 100;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = options{};
  o.line_size = 128 * 1024;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

TEST(Settings, EnvironmentOverridesDefaults) {
  setenv("WARPSTORE_LINE_SIZE", "512", 1);
  setenv("WARPSTORE_CONTROLLER", "memory", 1);
  setenv("WARPSTORE_TIMEOUT_MS", "250", 1);
  const options o = options::from_environment();
  EXPECT_EQ(o.line_size, 512u);
  EXPECT_EQ(o.controller, controller_kind::memory);
  EXPECT_EQ(o.timeout_ns, 250'000'000ull);
  setenv("WARPSTORE_QUEUE_DEPTH", "-4", 1);
  EXPECT_THROW(options::from_environment(), std::invalid_argument);
  unsetenv("WARPSTORE_LINE_SIZE");
  unsetenv("WARPSTORE_CONTROLLER");
  unsetenv("WARPSTORE_TIMEOUT_MS");
  unsetenv("WARPSTORE_QUEUE_DEPTH");
}

namespace {

// Sets one variable for a scope and unsets it after.
struct scoped_env {
  const char* name;
  scoped_env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~scoped_env() { unsetenv(name); }
};

// The message of from_environment()'s std::invalid_argument, or "" if it
// accepted the environment.
std::string environment_error() {
  try {
    options::from_environment();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST(SettingsRange, TimeoutWhoseNanosecondsOverflowIsRefused) {
  {
    // 18446744073710 ms * 1e6 wraps to about 0.4 ms: every read would time out.
    scoped_env e("WARPSTORE_TIMEOUT_MS", "18446744073710");
    const std::string m = environment_error();
    EXPECT_TRUE(contains(m, "WARPSTORE_TIMEOUT_MS")) << m;
    EXPECT_TRUE(contains(m, "18446744073710")) << m;
    EXPECT_TRUE(contains(m, "18446744073709")) << m;  // the largest allowed
  }
  {
    scoped_env e("WARPSTORE_TIMEOUT_MS", "18446744073709");
    EXPECT_EQ(options::from_environment().timeout_ns, 18446744073709ull * 1'000'000ull);
  }
  {
    scoped_env e("WARPSTORE_TIMEOUT_MS", "99999999999999999999999");  // past 64 bits
    const std::string m = environment_error();
    EXPECT_TRUE(contains(m, "WARPSTORE_TIMEOUT_MS")) << m;
  }
}

TEST(SettingsRange, ZeroTimeoutIsRefusedAsNotPositive) {
  scoped_env e("WARPSTORE_TIMEOUT_MS", "0");
  const std::string m = environment_error();
  EXPECT_TRUE(contains(m, "WARPSTORE_TIMEOUT_MS=0")) << m;
  EXPECT_TRUE(contains(m, "positive")) << m;
  options o;
  o.timeout_ns = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

TEST(SettingsRange, CountsAboveThirtyTwoBitsAreRefusedNotWrapped) {
  // 2^32 + 4 would wrap to 4 (a valid value) in a uint32_t.
  for (const char* name : {"WARPSTORE_THREADS", "WARPSTORE_QUEUES", "WARPSTORE_QUEUE_DEPTH",
                           "WARPSTORE_URING_DEPTH", "WARPSTORE_CACHE_WAYS"}) {
    scoped_env e(name, "4294967300");
    const std::string m = environment_error();
    EXPECT_TRUE(contains(m, std::string(name) + "=4294967300")) << name << ": " << m;
    EXPECT_TRUE(contains(m, "out of range")) << name << ": " << m;
  }
  {
    scoped_env e("WARPSTORE_LINE_SIZE", "4294967808");  // 2^32 + 512
    const std::string m = environment_error();
    EXPECT_TRUE(contains(m, "WARPSTORE_LINE_SIZE=4294967808")) << m;
  }
  {
    scoped_env e("WARPSTORE_LINE_SIZE", "4GiB");
    EXPECT_TRUE(contains(environment_error(), "WARPSTORE_LINE_SIZE")) << environment_error();
  }
}

TEST(SettingsRange, EachVariableIsCheckedAgainstItsRange) {
  struct bad_case {
    const char* name;
    const char* value;
    const char* range;
  };
  for (const bad_case& c : std::initializer_list<bad_case>{
           {"WARPSTORE_THREADS", "0", "from 1 to 256"},
           {"WARPSTORE_THREADS", "257", "from 1 to 256"},
           {"WARPSTORE_QUEUES", "65536", "from 0 to 65535"},
           {"WARPSTORE_QUEUE_DEPTH", "100", "a power of two from 2 to 4096"},
           {"WARPSTORE_URING_DEPTH", "0", "from 1 to 32768"},
           {"WARPSTORE_CACHE_WAYS", "65", "from 1 to 64"},
           {"WARPSTORE_LINE_SIZE", "3000", "a power of two from 512 to 65536"},
           {"WARPSTORE_CACHE_BYTES", "0", "at least one set"},
           {"WARPSTORE_WRITABLE", "2", "0 or 1"}}) {
    scoped_env e(c.name, c.value);
    const std::string m = environment_error();
    EXPECT_TRUE(contains(m, std::string(c.name) + "=" + c.value)) << m;
    EXPECT_TRUE(contains(m, c.range)) << m;
  }
  // Text that is not a number names the variable too.
  for (const char* name : {"WARPSTORE_CACHE_BYTES", "WARPSTORE_LINE_SIZE", "WARPSTORE_THREADS"}) {
    scoped_env e(name, "lots");
    const std::string m = environment_error();
    EXPECT_TRUE(contains(m, name)) << m;
    EXPECT_TRUE(contains(m, "lots")) << m;
  }
  for (const char* name : {"WARPSTORE_CONTROLLER", "WARPSTORE_DIRECT", "WARPSTORE_DELIVERY"}) {
    scoped_env e(name, "sideways");
    const std::string m = environment_error();
    EXPECT_TRUE(contains(m, name)) << m;
    EXPECT_TRUE(contains(m, "sideways")) << m;
  }
  scoped_env e("WARPSTORE_THREADS", "+3");
  EXPECT_FALSE(environment_error().empty());
}

TEST(SettingsRange, ValidateNamesTheSettingTheValueAndTheRange) {
  options o;
  o.service_threads = 1000;
  try {
    o.validate();
    FAIL() << "1000 threads accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "service_threads")) << m;
    EXPECT_TRUE(contains(m, "1000")) << m;
    EXPECT_TRUE(contains(m, "from 1 to 256")) << m;
  }
  o = options{};
  o.uring_depth = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = options{};
  o.ways = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = options{};
  o.queue_pairs = 70000;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = options{};
  o.cache_bytes = std::size_t{1} << 62;  // 2^50 lines of 4 KiB: more than 2^31
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.cache_bytes = std::size_t{1} << 40;  // 2^28 lines
  EXPECT_NO_THROW(o.validate());
}

namespace {

// A valid value of `s` other than its default, as the variable spells it.
std::string other_value(const setting& s) {
  const options defaults;
  if (s.type == setting_type::choice) {
    std::string choices = s.choices;
    for (std::size_t at = 0;;) {
      const std::size_t bar = choices.find('|', at);
      const std::string word = choices.substr(at, bar - at);
      if (word != s.get_word(defaults)) return word;
      at = bar + 1;
    }
  }
  return std::to_string(s.get(defaults) != s.min ? s.min : s.max);
}

}  // namespace

TEST(SettingsTable, NamesAreUniqueAndEveryDefaultIsInRange) {
  const options defaults;
  for (const setting& s : settings_table()) {
    EXPECT_EQ(find_setting(s.name), &s) << s.name;
    EXPECT_EQ(find_setting(s.variable), &s) << s.variable;
    EXPECT_EQ(find_setting(s.flag), &s) << s.flag;
    if (*s.python) {
      EXPECT_EQ(find_setting(s.python), &s) << s.python;
    }
    EXPECT_EQ(std::string(s.variable).rfind("WARPSTORE_", 0), 0u) << s.variable;
    EXPECT_NE(std::string(s.doc), "") << s.name;
    options o;
    EXPECT_NO_THROW(s.apply(o, s.text(defaults), s.variable)) << s.name;
  }
}

TEST(SettingsTable, EveryVariableIsParsedIntoItsField) {
  const options defaults;
  for (const setting& s : settings_table()) {
    const std::string value = other_value(s);
    ASSERT_NE(value, s.text(defaults)) << s.name;
    scoped_env e(s.variable, value.c_str());
    EXPECT_EQ(s.text(options::from_environment()), value) << s.variable;
  }
}

TEST(SettingsTable, OutOfRangeValuesAreRefusedNamingTheVariable) {
  for (const setting& s : settings_table()) {
    std::vector<std::string> bad;
    if (s.type == setting_type::choice) bad.push_back("sideways");
    else {
      if (s.max < UINT64_MAX) bad.push_back(std::to_string(s.max + 1));
      if (s.min > 0) bad.push_back(std::to_string(s.min - 1));
      if (s.power_of_two) bad.push_back(std::to_string(s.min + 1));
      bad.push_back("-1");
    }
    for (const std::string& value : bad) {
      scoped_env e(s.variable, value.c_str());
      const std::string m = environment_error();
      EXPECT_TRUE(contains(m, s.variable)) << s.variable << "=" << value << ": " << m;
      EXPECT_TRUE(contains(m, value)) << s.variable << "=" << value << ": " << m;
    }
  }
}

TEST(SettingsTable, ValidateChecksEveryNumericRange) {
  for (const setting& s : settings_table()) {
    if (s.type != setting_type::size && s.type != setting_type::count) continue;
    if (s.max == UINT64_MAX && s.min == 0) continue;  // any value is in range
    options o;
    s.put(o, s.max < UINT64_MAX ? s.max + 1 : s.min - 1);
    try {
      o.validate();
      ADD_FAILURE() << s.name << " out of range accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_TRUE(contains(e.what(), s.name) || contains(e.what(), s.variable)) << e.what();
    }
  }
}

TEST(SettingsTable, TuningSwitchesAreTheirOwnGroup) {
  for (const char* name : {"combine_writes", "eager_write_back", "overlapped_eviction", "deliver",
                           "write_behind_bytes"})
    EXPECT_EQ(find_setting(name)->group, setting_group::tuning) << name;
  EXPECT_EQ(find_setting("cache_bytes")->group, setting_group::core);
  const std::string md = settings_markdown();
  EXPECT_LT(md.find("`cache_bytes`"), md.find("Tuning"));
  EXPECT_GT(md.find("`combine_writes`"), md.find("Tuning"));
}

// The default service threads: a quarter of the cores this process may run
// on, shared by the node's local processes (torchrun's LOCAL_WORLD_SIZE).
TEST(SettingsDefaults, ServiceThreadsShareTheCoresWithTheNodesOtherProcesses) {
  cpu_set_t saved;
  ASSERT_EQ(::sched_getaffinity(0, sizeof saved, &saved), 0);
  const unsigned cores = static_cast<unsigned>(CPU_COUNT(&saved));
  const auto expect = [&](unsigned c, unsigned local) { return std::clamp(c / 4 / local, 1u, 4u); };
  ::unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_EQ(default_service_threads(), expect(cores, 1));
  EXPECT_EQ(process_cores(), cores);
  {
    scoped_env e("LOCAL_WORLD_SIZE", "2");
    EXPECT_EQ(default_service_threads(), expect(cores, 2));
    EXPECT_EQ(process_cores(), std::max(1u, cores / 2));
  }
  {
    scoped_env e("LOCAL_WORLD_SIZE", "4096");  // many processes: one thread each, never none
    EXPECT_EQ(default_service_threads(), 1u);
    EXPECT_EQ(process_cores(), 1u);
  }
  {
    scoped_env e("LOCAL_WORLD_SIZE", "two");  // not a count: as if unset
    EXPECT_EQ(default_service_threads(), expect(cores, 1));
  }
  // Confined to one core (as a scheduler may pin a process): one thread.
  const auto pinned =
      test::on_one_core([] { return std::pair(default_service_threads(), process_cores()); });
  ASSERT_TRUE(pinned.has_value());
  EXPECT_EQ(pinned->first, 1u);
  EXPECT_EQ(pinned->second, 1u);
}
