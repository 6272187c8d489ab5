// A one-line text progress bar on stderr for long passes over big files.
// On a terminal it redraws in place; into a log it writes a line per 10 %.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "support/args.h"
#include "support/timing.h"

namespace warpstore::bench {

class progress_bar {
 public:
  explicit progress_bar(std::string label, bool enabled = true)
      : label_(std::move(label)), enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1) {}

  // Redraws the bar; call as often as you like (it is cheap), finish() at the end.
  void update(std::uint64_t done, std::uint64_t total) {
    if (!enabled_) return;
    const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const int decile = static_cast<int>(frac * 10);
    if (!tty_ && decile == last_decile_) return;
    last_decile_ = decile;
    constexpr int width = 30;
    const int filled = static_cast<int>(frac * width);
    const double secs = clock_.seconds();
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "%s%s [%s] %3d%% %s / %s  %.2f GB/s %s", tty_ ? "\r" : "",
                 label_.c_str(), bar.c_str(),
                 static_cast<int>(frac * 100), format_size(done).c_str(), format_size(total).c_str(),
                 gb_per_s(static_cast<double>(done), secs), tty_ ? "" : "\n");
    std::fflush(stderr);
    drawn_ = tty_;
  }
  void finish() {
    if (enabled_ && drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }
  double seconds() const { return clock_.seconds(); }

 private:
  std::string label_;
  bool enabled_;
  bool tty_;
  bool drawn_ = false;
  int last_decile_ = -1;
  stopwatch clock_;
};

}  // namespace warpstore::bench
