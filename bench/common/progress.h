// A one-line text progress bar on stderr for long passes over big files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "bench/common/args.h"
#include "bench/common/timing.h"

namespace warpstore::bench {

class progress_bar {
 public:
  explicit progress_bar(std::string label, bool enabled = true)
      : label_(std::move(label)), enabled_(enabled) {}

  // Redraws the bar; call as often as you like (it is cheap), finish() at the end.
  void update(std::uint64_t done, std::uint64_t total) {
    if (!enabled_) return;
    const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    constexpr int width = 30;
    const int filled = static_cast<int>(frac * width);
    const double secs = clock_.seconds();
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r%s [%s] %3d%% %s / %s  %.2f GB/s ", label_.c_str(), bar.c_str(),
                 static_cast<int>(frac * 100), format_size(done).c_str(), format_size(total).c_str(),
                 gb_per_s(static_cast<double>(done), secs));
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    if (enabled_ && drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }
  double seconds() const { return clock_.seconds(); }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  stopwatch clock_;
};

}  // namespace warpstore::bench
