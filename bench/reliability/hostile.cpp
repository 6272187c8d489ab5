// Hostile inputs: every way a caller (or the filesystem) can hand warpstore
// something wrong, each expected to be refused with an error that says what
// and where, or (a file removed while open) to keep working.
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <system_error>

#include "bench/reliability/reliability.h"
#include "tools/pattern.cuh"
#include "tools/pattern_file.h"
#include "warpstore/runtime.h"

namespace warpstore::reliability {

namespace {

// A small pattern file that removes itself.
class scratch_file {
 public:
  scratch_file(const std::string& dir, const std::string& name, std::uint64_t bytes)
      : path_(dir + "/warpstore-hostile-" + std::to_string(::getpid()) + "-" + name) {
    tools::write_pattern_file(path_, bytes, 0, 1, {}, false);
  }
  ~scratch_file() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

options small_options() { return scenario_options(64 << 10, 1, 1, 2'000'000'000ull); }

// The case passes when `body` raises an E whose message holds every word of
// `must_say`.
template <class E>
hostile_case expect_refusal(const std::string& name, const std::function<void()>& body,
                            std::vector<std::string> must_say) {
  hostile_case c{name, false, false, ""};
  try {
    body();
    c.message = "accepted";
  } catch (const E& e) {
    c.message = e.what();
    c.refused_cleanly = true;
    for (const auto& w : must_say)
      c.refused_cleanly = c.refused_cleanly && c.message.find(w) != std::string::npos;
  } catch (const std::exception& e) {
    c.message = std::string("wrong exception: ") + e.what();
  }
  return c;
}

// A device-side bad index: the read yields 0, check() raises index_error
// naming it, and the array keeps serving good indices.
hostile_case bad_index(const std::string& name, const scratch_file& f, std::uint64_t index,
                       const reader& read) {
  hostile_case c{name, false, false, ""};
  array<std::uint64_t> a(f.path(), 0, small_options());
  std::vector<std::uint64_t> out(2);
  read(a, {index, 5}, out);
  try {
    a.check();
    c.message = "no error raised";
  } catch (const index_error& e) {
    c.message = e.what();
    c.refused_cleanly = out[0] == 0 && out[1] == tools::pattern_word(5 * 8) && e.index() == index &&
                        c.message.find(std::to_string(index)) != std::string::npos;
  } catch (const std::exception& e) {
    c.message = std::string("wrong exception: ") + e.what();
  }
  return c;
}

hostile_case truncated_while_open(const std::string& dir, const reader& read) {
  hostile_case c{"file truncated while open", false, false, ""};
  scratch_file f(dir, "truncated", 1 << 20);
  array<std::uint64_t> a(f.path(), 0, small_options());
  if (::truncate(f.path().c_str(), 64 << 10) != 0) {
    c.message = "truncate failed";
    return c;
  }
  const std::uint64_t past = (512 << 10) / 8;  // an element now past the end, never cached
  std::vector<std::uint64_t> out(2);
  read(a, {past, 3}, out);
  try {
    a.check();
    c.message = "no error raised";
  } catch (const io_error& e) {
    c.message = e.what();
    c.refused_cleanly = out[0] == 0 && out[1] == tools::pattern_word(3 * 8) &&
                        e.index() == past && !e.status().success();
  } catch (const std::exception& e) {
    c.message = std::string("wrong exception: ") + e.what();
  }
  return c;
}

hostile_case removed_while_open(const std::string& dir, const reader& read) {
  hostile_case c{"file removed while open (keeps reading the open file)", false, false, ""};
  scratch_file f(dir, "removed", 1 << 20);
  array<std::uint64_t> a(f.path(), 0, small_options());
  std::filesystem::remove(f.path());
  const std::vector<std::uint64_t> idx = random_indices(a.size(), 2000, 3);
  std::vector<std::uint64_t> out(idx.size());
  read(a, idx, out);
  std::uint64_t wrong = 0;
  for (std::size_t k = 0; k < idx.size(); ++k) wrong += out[k] != tools::pattern_word(idx[k] * 8);
  try {
    a.check();
    c.refused_cleanly = wrong == 0;
    c.message = std::to_string(wrong) + " wrong values of " + std::to_string(idx.size());
  } catch (const std::exception& e) {
    c.message = std::string("unexpected error: ") + e.what();
  }
  return c;
}

hostile_case unreadable_file(const std::string& dir) {
  if (::geteuid() == 0)
    return {"file without read permission", false, true, "skipped: running as root"};
  scratch_file f(dir, "unreadable", 64 << 10);
  ::chmod(f.path().c_str(), 0);
  return expect_refusal<std::system_error>(
      "file without read permission",
      [&] { array<std::uint64_t> a(f.path(), 0, small_options()); }, {f.path(), "ermission"});
}

template <class T>
void open_as(const std::string& path, std::uint64_t count, std::uint64_t offset,
             const options& o = small_options()) {
  array<T> a(path, count, o, offset);
}

options with(const std::function<void(options&)>& change) {
  options o = small_options();
  change(o);
  return o;
}

}  // namespace

std::vector<hostile_case> run_hostile(const std::string& dir, const reader& read, bool gpu) {
  std::vector<hostile_case> cases;
  scratch_file f(dir, "good", 1 << 20);
  scratch_file empty(dir, "empty", 0);
  const std::string missing = dir + "/warpstore-hostile-does-not-exist";
  const std::uint64_t n = (1 << 20) / 8;
  using std::invalid_argument;

  cases.push_back(bad_index("index out of range", f, n, read));
  cases.push_back(bad_index("negative index (as a huge unsigned)", f,
                            static_cast<std::uint64_t>(-1), read));
  cases.push_back(expect_refusal<invalid_argument>(
      "file shorter than the declared shape", [&] { open_as<std::uint64_t>(f.path(), n + 1, 0); },
      {f.path(), std::to_string(n + 1)}));
  cases.push_back(expect_refusal<invalid_argument>(
      "byte offset not block-aligned", [&] { open_as<std::uint64_t>(f.path(), 0, 100); },
      {"offset 100", "512"}));
  cases.push_back(expect_refusal<invalid_argument>(
      "byte offset past the end", [&] { open_as<std::uint64_t>(f.path(), 0, 2 << 20); },
      {"past the end"}));
  cases.push_back(expect_refusal<invalid_argument>(
      "element size not a power of two",
      [&] { open_as<std::array<char, 12>>(f.path(), 0, 0); }, {"element size 12"}));
  cases.push_back(expect_refusal<invalid_argument>(
      "zero-length file", [&] { open_as<std::uint64_t>(empty.path(), 0, 0); },
      {empty.path(), "no element"}));
  cases.push_back(expect_refusal<invalid_argument>(
      "directory path", [&] { open_as<std::uint64_t>(dir, 0, 0); }, {dir}));
  cases.push_back(expect_refusal<std::system_error>(
      "missing file", [&] { open_as<std::uint64_t>(missing, 0, 0); }, {missing}));
  cases.push_back(unreadable_file(dir));
  cases.push_back(expect_refusal<invalid_argument>(
      "line size not a power of two",
      [&] { open_as<std::uint64_t>(f.path(), 0, 0, with([](options& o) { o.line_size = 3000; })); },
      {"line_size", "3000"}));
  cases.push_back(expect_refusal<invalid_argument>(
      "line size below range",
      [&] { open_as<std::uint64_t>(f.path(), 0, 0, with([](options& o) { o.line_size = 256; })); },
      {"line_size", "256"}));
  cases.push_back(expect_refusal<invalid_argument>(
      "line size above range", [&] {
        open_as<std::uint64_t>(f.path(), 0, 0, with([](options& o) { o.line_size = 128 << 10; }));
      },
      {"line_size", "131072"}));
  cases.push_back(expect_refusal<invalid_argument>(
      "queue depth not a power of two",
      [&] { open_as<std::uint64_t>(f.path(), 0, 0, with([](options& o) { o.queue_depth = 48; })); },
      {"queue_depth", "48"}));
  cases.push_back(expect_refusal<invalid_argument>(
      "zero timeout",
      [&] { open_as<std::uint64_t>(f.path(), 0, 0, with([](options& o) { o.timeout_ns = 0; })); },
      {"timeout"}));
  cases.push_back(truncated_while_open(dir, read));
  cases.push_back(removed_while_open(dir, read));
  if (gpu) {
    cases.push_back(expect_refusal<invalid_argument>(
        "cache larger than free GPU memory", [&] {
          open_as<std::uint64_t>(f.path(), 0, 0,
                                 with([](options& o) {
                                   // Twice the free memory: the cache rounds its sets down
                                   // to a power of two, which can halve a request.
                                   o.cache_bytes = 2 * runtime::free_device_memory() + (8ull << 30);
                                 }));
        },
        {"GPU memory"}));
  }
  return cases;
}

bench::result hostile_result(const std::vector<hostile_case>& cases, const std::string& target) {
  std::uint64_t tried = 0, clean = 0, skipped = 0;
  bench::json::array refused, failed, skips;
  for (const auto& c : cases) {
    if (c.skipped) {
      ++skipped;
      skips.push_back(c.name + ": " + c.message);
      continue;
    }
    ++tried;
    if (c.refused_cleanly) {
      ++clean;
      refused.push_back(c.name);
    } else {
      failed.push_back(c.name + ": " + c.message);
    }
  }
  bench::result r;
  r.name = target == "gpu" ? "hostile.inputs.gpu" : "hostile.inputs";
  r.value = static_cast<double>(tried);
  r.unit = "cases";
  r.verified = true;
  r.mismatches = tried - clean;
  r.params = bench::json::object_builder()
                 .add("target", target)
                 .add("refused_cleanly", clean)
                 .add("skipped", skipped)
                 .add("cases", std::move(refused))
                 .add("not_refused", std::move(failed))
                 .add("skipped_cases", std::move(skips))
                 .add("not_done", "writes to a read-only open, file without write permission, "
                                  "dtype/shape mismatch from Python: no write path or Python "
                                  "binding exists yet (issue 4 and later)")
                 .done();
  return r;
}

}  // namespace warpstore::reliability
