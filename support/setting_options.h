// Command-line options made from the settings table (include/warpstore/settings.h):
// a benchmark names the settings it lets the user set, and gets each one's
// --flag, value syntax, range check and help from the table.
//
//   declare_options(cmd, {{"line_size"}, {"cache_bytes", "4GiB"}});
//   options o = apply_options(args);  // the environment, then the flags given
//
// Needs the warpstore library linked (the benchmarks all have it).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "support/args.h"
#include "warpstore/settings_table.h"

namespace warpstore::bench {

struct setting_option {
  std::string_view setting;      // a field name, variable or flag of the table
  std::string default_value{};   // "": the setting's value in the environment
  std::string help{};            // "": the first clause of the table's doc line
};

// Declares --FLAG VALUE for each setting; std::logic_error for a name the
// table lacks.
void declare_options(command_spec& cmd, std::initializer_list<setting_option> settings);

// `base` with every setting option declared on the command applied, the
// range checked; usage_error names the flag and the text.
options apply_options(const parsed_args& args, options base = options::from_environment());

}  // namespace warpstore::bench
