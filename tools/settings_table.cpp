// warpstore-settings: README's settings section, generated from the settings
// table (include/warpstore/settings.h). Prints it, or checks or rewrites the
// part of a file between its settings:begin and settings:end markers.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "support/cli_main.h"
#include "warpstore/settings_table.h"

namespace {

constexpr const char* begin_marker = "<!-- settings:begin -->\n";
constexpr const char* end_marker = "<!-- settings:end -->";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// [first, last) of the text between the markers.
std::pair<std::size_t, std::size_t> section(const std::string& text, const std::string& path) {
  const std::size_t b = text.find(begin_marker);
  const std::size_t e = text.find(end_marker);
  if (b == std::string::npos || e == std::string::npos || e < b)
    throw std::runtime_error(path + " has no settings:begin / settings:end markers");
  return {b + std::string(begin_marker).size(), e};
}

int run(const warpstore::bench::parsed_args& a) {
  const std::string table = warpstore::settings_markdown();
  const std::string check = a.str("check"), update = a.str("update");
  if (check.empty() && update.empty()) {
    std::fputs(table.c_str(), stdout);
    return 0;
  }
  const std::string& path = check.empty() ? update : check;
  std::string text = read_file(path);
  const auto [first, last] = section(text, path);
  if (text.compare(first, last - first, table) == 0) return 0;
  if (!check.empty()) {
    std::fprintf(stderr,
                 "warpstore-settings: the settings table of %s differs from the settings table "
                 "(src/settings.cpp); run warpstore-settings --update %s\n--- expected:\n%s",
                 path.c_str(), path.c_str(), table.c_str());
    return 1;
  }
  text.replace(first, last - first, table);
  std::ofstream(path, std::ios::binary) << text;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  warpstore::bench::arg_parser parser(
      "warpstore-settings", "Prints README's settings tables, made from the settings table.");
  parser.common()
      .option("check", "FILE", "", "exit 1 when FILE's settings section differs")
      .option("update", "FILE", "", "rewrite FILE's settings section");
  return warpstore::tools::cli_main(parser, "warpstore-settings", argc, argv, run);
}
