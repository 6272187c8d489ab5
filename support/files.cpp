#include "support/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "support/args.h"
#include "support/pattern_file.h"
#include "support/progress.h"

namespace warpstore::bench {

namespace {
unsigned default_threads(unsigned threads) {
  return threads ? threads : std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
}
}  // namespace

std::uint64_t file_bytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw std::system_error(errno, std::generic_category(), "stat " + path);
  return static_cast<std::uint64_t>(st.st_size);
}

std::uint64_t ensure_pattern_file(const std::string& path, std::uint64_t size, std::uint64_t seed,
                                  bool size_must_match, unsigned threads) {
  threads = default_threads(threads);
  if (!std::filesystem::exists(path)) {
    if (size == 0) throw std::runtime_error(path + " does not exist and no size was given to create it");
    const std::filesystem::path p(path);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    progress_bar bar("generating " + path);
    tools::write_pattern_file(path, size, seed, threads,
                              [&](std::uint64_t done, std::uint64_t total) { bar.update(done, total); });
    bar.finish();
    std::fprintf(stderr, "wrote %s (%s, pattern seed %llu) in %.1f s\n", path.c_str(),
                 format_size(size).c_str(), static_cast<unsigned long long>(seed), bar.seconds());
    return size;
  }
  const std::uint64_t bytes = file_bytes(path);
  if (size_must_match && bytes != size)
    throw std::runtime_error(path + " exists with " + std::to_string(bytes) + " bytes, not the " +
                             std::to_string(size) + " asked for; delete it or leave out --file-size");
  // Spot check: the first and the last MiB hold the pattern of `seed`.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
  tools::detail::fd_guard guard(fd);
  const std::uint64_t span = std::min<std::uint64_t>(bytes, 1 << 20);
  std::vector<unsigned char> buf(span);
  for (const std::uint64_t off : {std::uint64_t{0}, bytes - span}) {
    const std::uint64_t got = tools::detail::pread_all(fd, buf.data(), span, off, path);
    if (got != span || tools::count_mismatches(buf.data(), off, span, seed) != 0)
      throw std::runtime_error(path + " does not hold the pattern of seed " + std::to_string(seed) +
                               " (checked at offset " + std::to_string(off) +
                               "); regenerate it with warpstore-gen or pass its --file-seed");
  }
  return bytes;
}

double warm_page_cache(const std::string& path, unsigned threads) {
  threads = default_threads(threads);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
  tools::detail::fd_guard guard(fd);
  const std::uint64_t bytes = file_bytes(path);
  progress_bar bar("caching " + path, bytes >= (std::uint64_t{1} << 30));
  tools::detail::parallel_chunks(bytes, tools::detail::chunk_bytes, threads,
                                 [&](std::uint64_t done, std::uint64_t total) { bar.update(done, total); },
                                 [&](std::uint64_t off, std::uint64_t len) {
                                   thread_local std::vector<unsigned char> buf;
                                   buf.resize(tools::detail::chunk_bytes);
                                   tools::detail::pread_all(fd, buf.data(), len, off, path);
                                 });
  bar.finish();
  return bar.seconds();
}

void drop_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("opening " + path + " to drop its pages");
  ::fdatasync(fd);
  const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (rc != 0) throw std::runtime_error("posix_fadvise(DONTNEED) on " + path + " failed");
}

}  // namespace warpstore::bench
