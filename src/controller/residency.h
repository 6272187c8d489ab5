// How much of a file is in the page cache: direct=auto (backing_file) and
// controller=auto (make_controller) decide by it.
#pragma once

#include <cstdint>

namespace warpstore::detail {

// Share of the file's pages in the page cache, sampled: up to 256 pages
// spread evenly over it (mincore on a one-page mapping each), so a 10 TB file
// costs what a 10 MB one does. -1 when it cannot be told (mmap refused).
double sample_resident_share(int fd, std::uint64_t size);

}  // namespace warpstore::detail
