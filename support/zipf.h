// Zipf-distributed block indices: rank k in [1, n] has probability
// proportional to 1 / k^exponent (exponent > 0; 0.99 is the YCSB default).
// Sampling is rejection-inversion (Hormann and Derflinger, 1996), O(1) time
// and memory for any n. Sample i depends only on (seed, i), so a list can be
// filled in parallel and rebuilt identically anywhere. Ranks are scattered
// over the file by a fixed bijection so hot blocks are not all at its start.
#pragma once

#include <cstdint>
#include <vector>

namespace warpstore::bench {

class zipf_generator {
 public:
  zipf_generator(std::uint64_t n, double exponent, std::uint64_t seed, bool scatter = true);

  // Rank of sample i, in [1, n] (1 is the most frequent).
  std::uint64_t rank(std::uint64_t i) const;
  // Block index of sample i, in [0, n): rank scattered over the file.
  std::uint64_t index(std::uint64_t i) const;
  // Block of a rank, in [0, n).
  std::uint64_t block_of_rank(std::uint64_t rank) const;
  // out[k] = index(first + k) for k < count, on `threads` threads.
  void fill(std::uint64_t* out, std::uint64_t first, std::uint64_t count, unsigned threads = 0) const;
  std::vector<std::uint64_t> indices(std::uint64_t count, unsigned threads = 0) const;

  std::uint64_t n() const { return n_; }
  double exponent() const { return exponent_; }

 private:
  double h(double x) const;
  double h_integral(double x) const;
  double h_integral_inverse(double x) const;

  std::uint64_t n_;
  double exponent_;
  std::uint64_t seed_;
  bool scatter_;
  std::uint64_t stride_ = 1;  // coprime to n: rank r -> (r - 1) * stride mod n
  double h_integral_x1_;
  double h_integral_n_;
  double s_;
};

}  // namespace warpstore::bench
