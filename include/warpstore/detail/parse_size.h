// Sizes and counts as people write them: "4096", "4K", "4KiB", "64M",
// "1.5GiB" (binary units; K, KB and KiB all mean 1024). One parser for the
// settings, the environment and every command line.
#pragma once

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace warpstore::detail {

// Raises std::invalid_argument naming the text on anything else, on
// negatives and on overflow.
inline std::uint64_t parse_size(std::string_view text) {
  const std::string original(text);
  auto bad = [&](const char* why) {
    return std::invalid_argument("'" + original + "' is not a size or count (" + why +
                                 "; e.g. 4096, 4K, 64M, 1.5GiB)");
  };
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (text.empty()) throw bad("empty");
  std::size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  if (digits == 0) throw bad("no number");
  const std::string_view number = text.substr(0, digits);
  std::string suffix(text.substr(digits));
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!suffix.empty() && suffix.front() == ' ') suffix.erase(0, 1);

  unsigned shift = 0;
  if (suffix.empty() || suffix == "b") shift = 0;
  else {
    const char unit = suffix[0];
    const std::string rest = suffix.substr(1);
    if (rest != "" && rest != "b" && rest != "ib") throw bad("unknown unit");
    switch (unit) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      case 't': shift = 40; break;
      case 'p': shift = 50; break;
      default: throw bad("unknown unit");
    }
  }

  if (number.find('.') == std::string_view::npos) {
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
    if (ec != std::errc() || end != number.data() + number.size()) throw bad("bad number");
    if (shift != 0 && v > (UINT64_MAX >> shift)) throw bad("too large");
    return v << shift;
  }
  double v = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (ec != std::errc() || end != number.data() + number.size()) throw bad("bad number");
  const double bytes = std::ldexp(v, static_cast<int>(shift));
  if (!(bytes < 18446744073709551616.0)) throw bad("too large");
  const double rounded = std::round(bytes);
  if (std::fabs(rounded - bytes) > 1e-6 * std::max(1.0, bytes)) throw bad("not a whole number of bytes");
  return static_cast<std::uint64_t>(rounded);
}

}  // namespace warpstore::detail
