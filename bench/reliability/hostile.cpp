// Hostile inputs: every way a caller (or the filesystem) can hand warpstore
// something wrong, each expected to be refused with an error that says what
// and where, or (a file removed while open) to keep working.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <system_error>

#include "bench/reliability/reliability.h"
#include "controller/host_controller.h"
#include "support/pattern.cuh"
#include "support/pattern_file.h"
#include "support/raw_queue.h"
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

// The host controller's answers to hostile files (the memory controller's
// are cases of their own below): `auto` would pick the memory controller for
// these small files in the page cache.
options small_options() {
  options o = scenario_options(64 << 10, 1, 1, 2'000'000'000ull);
  o.controller = controller_kind::host;
  return o;
}

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

// Reads element `bad` and element `good` of `a` in one go: `c` passes when
// the bad read yields 0, the good one the file's value, and check() then
// raises an E for element `bad` of which also `precise(e)` holds.
template <class E, class Precise>
void expect_bad_read(hostile_case& c, const array<std::uint64_t>& a, const reader& read,
                     std::uint64_t bad, std::uint64_t good, Precise&& precise) {
  std::vector<std::uint64_t> out(2);
  read(a, {bad, good}, out);
  try {
    a.check();
    c.message = "no error raised";
  } catch (const E& e) {
    c.message = e.what();
    c.refused_cleanly =
        out[0] == 0 && out[1] == tools::pattern_word(good * 8) && e.index() == bad && precise(e);
  } catch (const std::exception& e) {
    c.message = std::string("wrong exception: ") + e.what();
  }
}

// A device-side bad index: the read yields 0, check() raises index_error
// naming it, and the array keeps serving good indices.
hostile_case bad_index(const std::string& name, const scratch_file& f, std::uint64_t index,
                       const reader& read) {
  hostile_case c{name, false, false, ""};
  array<std::uint64_t> a(f.path(), 0, small_options());
  expect_bad_read<index_error>(c, a, read, index, 5, [&](const index_error& e) {
    return std::string(e.what()).find(std::to_string(index)) != std::string::npos;
  });
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
  expect_bad_read<io_error>(c, a, read, past, 3,
                            [](const io_error& e) { return !e.status().success(); });
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

// Wrong bytes of the file against the pattern it was written with: a
// refused write must leave every byte as it was.
std::uint64_t file_damage(const std::string& path, std::uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bytes;
  std::vector<unsigned char> buf(bytes);
  const ssize_t got = ::pread(fd, buf.data(), buf.size(), 0);
  ::close(fd);
  if (got != static_cast<ssize_t>(bytes) || std::filesystem::file_size(path) != bytes) return bytes;
  return tools::count_mismatches(buf.data(), 0, bytes);
}

// What one attempt to open a file the caller may not use came to.
struct attempt {
  bool refused = false;  // the expected error, naming the file and the permission
  std::string message;
};

// Opens `path` with `o` the way a user would (the whole array), expecting
// std::system_error EACCES naming the file. A refused open fails before any
// thread starts. In a forked child of the GPU build only the controller is
// opened: CUDA does not work across fork, and the file is opened (and
// refused) before anything touches the GPU.
attempt open_expecting_denial(const std::string& path, const options& o, bool in_child) {
  attempt a;
  try {
    if (in_child && runtime::gpu_build())
      make_controller(path, o);
    else
      array<std::uint64_t> arr(path, 0, o);
    a.message = "accepted";
  } catch (const std::system_error& e) {
    a.message = e.what();
    a.refused = e.code().value() == EACCES && a.message.find(path) != std::string::npos &&
                a.message.find("ermission") != std::string::npos;
  } catch (const std::exception& e) {
    a.message = std::string("wrong exception: ") + e.what();
  }
  return a;
}

// Runs `body` where permission bits apply. Not root: here. Root: in a forked
// child that drops to uid and gid 65534 (nobody) first, since root opens any
// file whatever its mode. The case is skipped (never passed) when that
// cannot be done. `control` must open as that user: it proves the path is
// reachable, so a refusal is about the file's mode, not the directory.
hostile_case with_permission_bits(const std::string& name, const std::string& control,
                                  const options& o,
                                  const std::function<attempt(bool in_child)>& body) {
  hostile_case c{name, false, false, ""};
  if (::geteuid() != 0) {
    const attempt a = body(false);
    c.refused_cleanly = a.refused;
    c.message = a.message;
    return c;
  }
  int fds[2];
  if (::pipe(fds) != 0) return {name, false, true, "not tried: pipe failed"};
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return {name, false, true, "not tried: fork failed"};
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0 ||
        ::geteuid() == 0) {
      out = "S could not drop root to uid 65534";
    } else {
      try {
        // Only the file: a whole array would start service threads, which a
        // forked child (of a process that may have had threads) should not.
        backing_file(control, direct_io::off,
                     o.writable ? file_access::read_write : file_access::read_only);
        const attempt a = body(true);
        out = std::string(a.refused ? "R " : "N ") + a.message + " (as uid 65534)";
      } catch (const std::exception& e) {
        out = std::string("S uid 65534 cannot open even a permitted file here: ") + e.what();
      }
    }
    const ssize_t w = ::write(fds[1], out.data(), out.size());
    (void)w;
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[512];
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          end - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (timed_out) {
    c.message = "the unprivileged attempt did not finish within 60 s";
  } else if (got.size() >= 2 && got[0] == 'S') {
    c.skipped = true;
    c.message = "not tried: " + got.substr(2);
  } else if (got.size() >= 2 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    c.refused_cleanly = got[0] == 'R';
    c.message = got.substr(2);
  } else {
    c.message = "the unprivileged attempt died (status " + std::to_string(status) + ")";
  }
  return c;
}

// A file whose mode forbids what the open asks for (read: mode 000; write:
// mode 0444 opened writable) is refused, and its bytes stay as they were.
hostile_case forbidden_file(const std::string& dir, bool want_write) {
  const std::string name = want_write ? "file without write permission, opened writable"
                                      : "file without read permission";
  scratch_file f(dir, want_write ? "unwritable" : "unreadable", 64 << 10);
  scratch_file control(dir, want_write ? "writable-control" : "readable-control", 64 << 10);
  ::chmod(control.path().c_str(), 0666);
  ::chmod(f.path().c_str(), want_write ? 0444 : 0);
  options o = small_options();
  o.writable = want_write;
  hostile_case c = with_permission_bits(name, control.path(), o, [&](bool in_child) {
    return open_expecting_denial(f.path(), o, in_child);
  });
  ::chmod(f.path().c_str(), 0644);
  const std::uint64_t damage = file_damage(f.path(), 64 << 10);
  if (damage != 0) {
    c.refused_cleanly = false;
    c.message += "; " + std::to_string(damage) + " bytes of the file changed";
  }
  return c;
}

// Stores (or a write_span) into an array over a read-only open: refused in
// the kernel with namespace_write_protected at the first element, raised by
// check(); nothing dirtied in the cache, nothing written to the file.
hostile_case device_write_read_only(const std::string& dir, controller_kind kind, bool span,
                                    const reader& read, const writer& write) {
  const std::string name = std::string(span ? "write_span" : "store") +
                           " on a read-only open (" + to_string(kind) + " controller)";
  hostile_case c{name, false, false, ""};
  const std::uint64_t bytes = 1 << 20;
  scratch_file f(dir, span ? "readonly-span" : "readonly-store", bytes);
  options o = small_options();
  o.controller = kind;
  const std::vector<std::uint64_t> idx =
      span ? std::vector<std::uint64_t>{1000} : std::vector<std::uint64_t>{3, 777, 4100, 50000};
  const std::vector<std::uint64_t> values(span ? 600 : idx.size(), 0xBADBADBADBADBADull);
  std::vector<std::uint64_t> back(span ? values.size() : idx.size());
  std::vector<std::uint64_t> look(back.size());
  for (std::size_t k = 0; k < look.size(); ++k) look[k] = span ? idx[0] + k : idx[k];
  {
    array<std::uint64_t> a(f.path(), 0, o);
    // The lines are in the cache first: a refused store must not dirty them.
    read(a, look, back);
    write(a, idx, values, span);
    try {
      a.check();
      c.message = "no error raised";
    } catch (const io_error& e) {
      c.message = e.what();
      bool named = false;
      for (std::uint64_t i : idx) named = named || e.index() == i;
      c.refused_cleanly = e.status().code() == nvme::sc::namespace_write_protected &&
                          e.status().type() == nvme::status_type::generic && named &&
                          e.count() == idx.size() &&
                          c.message.find("write protected") != std::string::npos &&
                          c.message.find(std::to_string(e.index())) != std::string::npos;
    } catch (const std::exception& e) {
      c.message = std::string("wrong exception: ") + e.what();
    }
    read(a, look, back);
    std::uint64_t wrong = 0;
    for (std::size_t k = 0; k < look.size(); ++k)
      wrong += back[k] != tools::pattern_word(look[k] * 8);
    try {
      a.flush();  // read-only: nothing to write, nothing to raise
    } catch (const std::exception& e) {
      c.refused_cleanly = false;
      c.message += std::string("; flush raised: ") + e.what();
    }
    if (wrong != 0) {
      c.refused_cleanly = false;
      c.message += "; " + std::to_string(wrong) + " elements read back changed";
    }
  }
  if (const std::uint64_t damage = file_damage(f.path(), bytes); damage != 0) {
    c.refused_cleanly = false;
    c.message += "; " + std::to_string(damage) + " bytes of the file changed";
  }
  return c;
}

// A WRITE command from the host to a read-only open, bypassing the array:
// for the host controller through its submission queue (the rings and
// doorbells are host memory), for the memory controller its execute path.
// Refused with namespace_write_protected; the file keeps its bytes and the
// controller keeps serving.
hostile_case host_write_read_only(const std::string& dir, controller_kind kind) {
  const std::string name =
      std::string("WRITE command from the host to a read-only open (") + to_string(kind) + ")";
  hostile_case c{name, false, false, ""};
  const std::uint64_t bytes = 1 << 20;
  scratch_file f(dir, "readonly-host-write", bytes);
  options o = small_options();
  nvme::status st{};
  bool read_ok = false;
  if (kind == controller_kind::host) {
    host_controller ctl(std::make_shared<backing_file>(f.path(), direct_io::off), o, o.line_size);
    const queue_pair_ref& qp = ctl.queues().view(0);
    test::raw_queue q(qp);
    std::memset(qp.staging_of(0), 0xAB, 4096);
    q.push(nvme::make_rw(nvme::opcode::write, 0, 1, 8, 8,
                         reinterpret_cast<std::uint64_t>(qp.staging_of(0))));
    q.push(nvme::make_rw(nvme::opcode::read, 0, 1, 16, 8,
                         reinterpret_cast<std::uint64_t>(qp.staging_of(1))));
    q.ring_sq();
    bool done = q.wait_phase(0, true) && q.wait_phase(1, true);
    if (!done) {
      c.message = "no completion within 30 s";
      return c;
    }
    for (std::uint32_t k = 0; k < 2; ++k) {
      const std::uint32_t w = q.dw3(k);
      if (nvme::dw3_cid(w) == 0) st = nvme::dw3_status(w);
      if (nvme::dw3_cid(w) == 1)
        read_ok = nvme::dw3_status(w).success() &&
                  tools::count_mismatches(qp.staging_of(1), 16 * 512, 4096) == 0;
    }
    q.retire(2);
    try {
      ctl.check();
    } catch (const std::exception& e) {
      c.message = std::string("controller failed: ") + e.what();
      return c;
    }
  } else {
    o.controller = controller_kind::memory;
    const auto ctl = make_controller(f.path(), o);
    std::vector<std::byte> data(4096, std::byte{0xAB});
    st = ctl->device_ref().memory.execute_write(1u, io_request{8, 8, data.data()});
    std::vector<std::byte> got(4096);
    read_ok = ctl->device_ref().memory.execute_read(1u, io_request{16, 8, got.data()}).success() &&
              tools::count_mismatches(got.data(), 16 * 512, 4096) == 0;
  }
  c.message = describe(st);
  c.refused_cleanly = st.type() == nvme::status_type::generic &&
                      st.code() == nvme::sc::namespace_write_protected && read_ok;
  if (!read_ok) c.message += "; the next READ was not served right";
  if (const std::uint64_t damage = file_damage(f.path(), bytes); damage != 0) {
    c.refused_cleanly = false;
    c.message += "; " + std::to_string(damage) + " bytes of the file changed";
  }
  return c;
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

std::vector<hostile_case> run_hostile(const std::string& dir, const reader& read,
                                      const writer& write, bool gpu) {
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
  cases.push_back(forbidden_file(dir, false));
  cases.push_back(forbidden_file(dir, true));
  for (controller_kind kind : {controller_kind::host, controller_kind::memory}) {
    cases.push_back(device_write_read_only(dir, kind, false, read, write));
    cases.push_back(device_write_read_only(dir, kind, true, read, write));
    cases.push_back(host_write_read_only(dir, kind));
  }
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
                 .done();
  return r;
}

std::vector<hostile_case> read_hostile_cases(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (path.empty() || !in)
    return {{what, false, true,
             path.empty() ? "not tried: no results given (--python-cases)"
                          : "not tried: cannot read " + path}};
  std::vector<hostile_case> cases;
  std::string line;
  while (std::getline(in, line)) {
    const auto t1 = line.find('\t');
    const auto t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
    if (t2 == std::string::npos) continue;
    const std::string verdict = line.substr(0, t1);
    hostile_case c{"Python: " + line.substr(t1 + 1, t2 - t1 - 1), verdict == "refused",
                   verdict == "skipped", line.substr(t2 + 1)};
    cases.push_back(std::move(c));
  }
  if (cases.empty()) return {{what, false, false, "no cases in " + path}};
  return cases;
}

}  // namespace warpstore::reliability
