// The benchmark data file: a pattern file (support/pattern_file.h) made on
// first use and spot-checked on every later one.
#pragma once

#include <cstdint>
#include <string>

namespace warpstore::bench {

// Size of the file at `path`; raises if it cannot be stat'ed.
std::uint64_t file_bytes(const std::string& path);

// Makes sure `path` holds the pattern of `seed`. A missing file is written
// (`size` bytes, with a progress bar on stderr). An existing one is used as
// it is after checking its first and last MiB against the pattern; with
// `size_must_match` its size must also equal `size`. Returns the file size.
std::uint64_t ensure_pattern_file(const std::string& path, std::uint64_t size, std::uint64_t seed,
                                  bool size_must_match = false, unsigned threads = 0);

// Reads the whole file once with buffered reads on `threads` threads, so the
// page cache holds it before a buffered-I/O measurement. Returns the seconds taken.
double warm_page_cache(const std::string& path, unsigned threads = 0);

// Drops the file's pages from the page cache (written back first: dirty
// pages cannot be dropped), so the next reads come from the device. Raises
// if the file cannot be opened or the kernel refuses.
void drop_page_cache(const std::string& path);

}  // namespace warpstore::bench
