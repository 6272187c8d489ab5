// The settings table: each runtime setting of `options` described once (its
// variable, type, range, group and doc line). options::from_environment() and
// validate(), the Python `settings` module, the command-line flags of the
// benchmarks (support/setting_options.h) and README's settings tables
// (warpstore-settings) are all made from it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "warpstore/settings.h"

namespace warpstore {

// How a setting's text is read: sizes take suffixes ("64K"), counts digits
// only, switches 0 or 1, choices one word of `choices`; milliseconds is a
// count whose field holds nanoseconds.
enum class setting_type { size, count, milliseconds, flag, choice };
// Core settings, and the tuning switches of experiments (measured options
// whose defaults are the best known; see BENCHMARKS.md).
enum class setting_group { core, tuning };

// One setting: where it lives in `options`, how it is spelled in each place,
// its range and its doc line. Numeric values are in the variable's unit.
struct setting {
  const char* name = "";      // the field of `options`
  const char* variable = "";  // WARPSTORE_*
  const char* python = "";    // the Python settings name, or ""
  const char* flag = "";      // the benchmarks' command-line option, without "--"
  setting_type type = setting_type::count;
  setting_group group = setting_group::core;
  std::uint64_t min = 0, max = UINT64_MAX;  // numeric types
  bool power_of_two = false;
  const char* choices = "";       // "host|memory" for a choice
  const char* range_note = "";    // the range in words where min and max don't say it, or ""
  const char* default_note = "";  // the default in words where it depends on the machine, or ""
  const char* doc = "";
  std::uint64_t (*get)(const options&) = nullptr;          // numeric types
  void (*put)(options&, std::uint64_t) = nullptr;          // numeric types, value in range
  const char* (*get_word)(const options&) = nullptr;       // choices
  void (*put_word)(options&, const std::string&) = nullptr;  // choices; raises naming them

  // The value of `o` as the variable would spell it ("4096", "host", "1").
  std::string text(const options& o) const;
  // Parses `text` and stores it in `o`; std::invalid_argument names `source`
  // (the variable, or "--flag") and the text: "WARPSTORE_THREADS=0 is out of range: ...".
  void apply(options& o, const std::string& text, const std::string& source) const;
  // "a power of two from 512 to 65536", "0 or 1", "host or memory".
  std::string range() const;
};

// Every setting, in README order (core first, then tuning).
std::span<const setting> settings_table();
// By field name, variable, Python name or flag; nullptr when none.
const setting* find_setting(std::string_view name);
// README's settings section (between its settings:begin/end markers).
std::string settings_markdown();

}  // namespace warpstore
