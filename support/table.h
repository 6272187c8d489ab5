// Aligned text tables for the benchmarks' stdout.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace warpstore::bench {

class table {
 public:
  explicit table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  // A row with fewer cells than headers is padded with empty cells.
  void add(std::vector<std::string> row);
  // Columns padded to their widest cell; cells that look like numbers are
  // right-aligned, others left-aligned (a lone "-" stands for a missing number).
  std::string str() const;
  friend std::ostream& operator<<(std::ostream& out, const table& t) { return out << t.str(); }

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace warpstore::bench
