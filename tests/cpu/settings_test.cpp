#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>

#include "warpstore/settings.h"

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
