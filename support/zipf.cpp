#include "support/zipf.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "support/trace.h"

namespace warpstore::bench {

namespace {

__extension__ typedef unsigned __int128 u128;

// log1p(x) / x, stable near 0.
double helper1(double x) {
  return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
// expm1(x) / x, stable near 0.
double helper2(double x) {
  return std::fabs(x) > 1e-8 ? std::expm1(x) / x
                             : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

}  // namespace

zipf_generator::zipf_generator(std::uint64_t n, double exponent, std::uint64_t seed, bool scatter)
    : n_(n), exponent_(exponent), seed_(seed), scatter_(scatter) {
  if (n == 0) throw std::invalid_argument("zipf: n must be at least 1");
  if (!(exponent > 0) || !std::isfinite(exponent))
    throw std::invalid_argument("zipf: exponent must be positive");
  h_integral_x1_ = h_integral(1.5) - 1.0;
  h_integral_n_ = h_integral(static_cast<double>(n) + 0.5);
  s_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
  // A stride near n / golden ratio, coprime to n, makes r -> r * stride mod n a
  // bijection that spreads neighbouring ranks far apart.
  if (n > 1) {
    stride_ = static_cast<std::uint64_t>(static_cast<double>(n) * 0.6180339887498949) | 1;
    while (std::gcd(stride_, n) != 1) ++stride_;
    stride_ %= n;
    if (stride_ == 0) stride_ = 1;
  }
}

double zipf_generator::h(double x) const { return std::exp(-exponent_ * std::log(x)); }

double zipf_generator::h_integral(double x) const {
  const double log_x = std::log(x);
  return helper2((1.0 - exponent_) * log_x) * log_x;
}

double zipf_generator::h_integral_inverse(double x) const {
  double t = x * (1.0 - exponent_);
  if (t < -1.0) t = -1.0;  // rounding may push it just below
  return std::exp(helper1(t) * x);
}

std::uint64_t zipf_generator::rank(std::uint64_t i) const {
  // Draws for sample i come from its own counter-based stream.
  const std::uint64_t stream = stream_word(seed_, i);
  for (std::uint64_t attempt = 0;; ++attempt) {
    const double unit = stream_unit(stream, attempt);
    const double u = h_integral_n_ + unit * (h_integral_x1_ - h_integral_n_);
    const double x = h_integral_inverse(u);
    double kd = std::floor(x + 0.5);
    if (kd < 1) kd = 1;
    if (kd > static_cast<double>(n_)) kd = static_cast<double>(n_);
    const auto k = static_cast<std::uint64_t>(kd);
    if (kd - x <= s_ || u >= h_integral(kd + 0.5) - h(kd)) return k;
  }
}

std::uint64_t zipf_generator::block_of_rank(std::uint64_t r) const {
  if (!scatter_) return r - 1;
  return static_cast<std::uint64_t>(
      (static_cast<u128>(r - 1) * stride_) % n_);
}

std::uint64_t zipf_generator::index(std::uint64_t i) const { return block_of_rank(rank(i)); }

void zipf_generator::fill(std::uint64_t* out, std::uint64_t first, std::uint64_t count,
                          unsigned threads) const {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::uint64_t>(threads, std::max<std::uint64_t>(1, count / 65536)));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([=, this] {
      const std::uint64_t b = count * t / threads, e = count * (t + 1) / threads;
      for (std::uint64_t k = b; k < e; ++k) out[k] = index(first + k);
    });
  }
  for (auto& th : pool) th.join();
}

std::vector<std::uint64_t> zipf_generator::indices(std::uint64_t count, unsigned threads) const {
  std::vector<std::uint64_t> v(count);
  fill(v.data(), 0, count, threads);
  return v;
}

}  // namespace warpstore::bench
