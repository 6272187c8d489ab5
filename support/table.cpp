#include "support/table.h"

#include <algorithm>
#include <cctype>

namespace warpstore::bench {

namespace {
bool numeric(const std::string& s) {
  if (s.empty()) return false;
  const char c = s[0];
  return std::isdigit(static_cast<unsigned char>(c)) ||
         ((c == '-' || c == '+' || c == '.') && s.size() > 1 &&
          std::isdigit(static_cast<unsigned char>(s[1])));
}
}  // namespace

void table::add(std::vector<std::string> row) {
  row.resize(std::max(row.size(), headers_.size()));
  rows_.push_back(std::move(row));
}

std::string table::str() const {
  std::size_t columns = headers_.size();
  for (const auto& r : rows_) columns = std::max(columns, r.size());
  std::vector<std::size_t> width(columns, 0);
  std::vector<bool> right(columns, true);
  auto measure = [&](const std::vector<std::string>& r) {
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  };
  measure(headers_);
  for (const auto& r : rows_) {
    measure(r);
    for (std::size_t c = 0; c < r.size(); ++c)
      if (!r[c].empty() && r[c] != "-" && !numeric(r[c])) right[c] = false;
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& r) {
    std::string l;
    for (std::size_t c = 0; c < columns; ++c) {
      const std::string cell = c < r.size() ? r[c] : "";
      const std::string pad(width[c] - cell.size(), ' ');
      if (c) l += "  ";
      l += right[c] ? pad + cell : cell + pad;
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + '\n';
  };
  line(headers_);
  std::vector<std::string> rule(columns);
  for (std::size_t c = 0; c < columns; ++c) rule[c] = std::string(width[c], '-');
  line(rule);
  for (const auto& r : rows_) line(r);
  return out;
}

}  // namespace warpstore::bench
