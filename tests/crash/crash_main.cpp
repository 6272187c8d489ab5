// warpstore-crash: kill -9 and power-cut trials of the crash workloads
// (crash_workload.h). Each trial runs the workload in a child process of its
// own (a fresh CUDA context on the GPU target), crashes it at a random
// instant, recovers in another child, and checks that recovery found exactly
// one committed state, never older than the last acknowledged commit and
// never newer than the commit in progress, with every byte right.
//
//   warpstore-crash [--workload all|checkpoint|kv] [--mode all|kill|powercut]
//                   [--trials 100] [--states 40] [--jobs 1] [--dir /tmp/..] [--json F]
//
// Crash instants are drawn within the run phase of an uninterrupted run (from
// its "prepared" report to its last commit), measured once per workload, so
// process start-up (a CUDA context) and teardown do not dilute them. With
// --jobs N, N trials run at once, each in its own directory; their schedule
// (seeds, instants) is drawn up front, so it does not depend on N.
//
// kill:     the run child is killed with SIGKILL after a random delay within
//           the time an uninterrupted run takes; in every other trial the
//           first recovery is killed too, at a random instant, and rerun.
// powercut: one child runs the workload over host controllers wrapped in the
//           power-cut layer (src/controller/powercut.h; with
//           WARPSTORE_CONTROLLER=nvme-model, software NVMe devices whose
//           medium the layer is), powers off at a
//           random instant (even trials) or as a random WRITE starts (odd
//           trials: its number drawn from the WRITEs of an uninterrupted
//           run, so the cut falls while writes are un-flushed however short
//           the write phases are), every later command failing; drops
//           un-flushed writes (all of them, or a random subset of blocks,
//           torn at 512 bytes), then recovers.
// Results (RESULTS.md format) crash.kill.recovered and crash.powercut.recovered:
// value = trials, mismatches = inconsistent recoveries + lost commits.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "controller/host_controller.h"
#include "controller/nvme_controller.h"
#include "controller/powercut.h"
#include "crash_workload.h"
#include "support/args.h"
#include "support/results.h"
#include "warpstore/runtime.h"

namespace fs = std::filesystem;
using namespace warpstore;
using namespace std::chrono;

namespace {

std::unique_ptr<crash::workload> make(const std::string& name) {
  if (name == "checkpoint") return crash::make_checkpoint_workload();
  if (name == "kv") return crash::make_kv_workload();
  throw bench::usage_error("unknown workload '" + name + "' (checkpoint or kv)");
}

// The controller is the host one unless WARPSTORE_CONTROLLER names another:
// nvme-model runs both kinds of trial (the power-cut layer is then the
// model's medium), memory kill trials only.
options workload_options() {
  options o = options::from_environment();
  if (o.controller == controller_kind::automatic) o.controller = controller_kind::host;
  o.writable = true;
  o.direct = direct_io::off;
  o.timeout_ns = 20'000'000'000ull;
  return o;
}

// ---- child side --------------------------------------------------------------

// Lines to the parent: "P" prepared, "A k" commit k acknowledged, "D name"
// the device, "W n" WRITEs the power-cut layers saw, "V state mismatches
// reverted detail" the verdict.
class reporter {
 public:
  explicit reporter(int fd) : fd_(fd) {}
  void line(const std::string& s) const {
    const std::string l = s + "\n";
    std::lock_guard<std::mutex> lock(mutex_);
    // Short lines to a pipe are written whole.
    if (::write(fd_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) std::_Exit(3);
  }

 private:
  int fd_;
  mutable std::mutex mutex_;
};

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s.empty() ? "-" : s;
}

int child_main(const bench::parsed_args& a) {
  const reporter out(static_cast<int>(a.integer("report-fd")));
  const std::string role = a.str("child");
  auto w = make(a.str("workload"));
  crash::env e;
  e.dir = a.str("dir");
  e.opts = workload_options();
  e.seed = a.count("seed");
  e.open = [](const std::string& path, const options& o) { return make_controller(path, o); };
  const std::uint64_t states = a.count("states");
  const auto ack = [&](std::uint64_t k) { out.line("A " + std::to_string(k)); };

  if (role == "run") {
    out.line("D " + runtime::device_name());
    w->prepare(e);
    out.line("P");
    w->run(e, states, ack);
    out.line("F");
    return 0;
  }
  if (role == "recover") {
    const crash::verdict v = w->recover(e);
    out.line("V " + std::to_string(v.state) + " " + std::to_string(v.mismatches) + " 0 " +
             one_line(v.detail));
    return 0;
  }
  // powercut: prepare on plain controllers, run over the power-cut layer,
  // cut at a random instant, recover on plain controllers.
  out.line("D " + runtime::device_name());
  w->prepare(e);
  out.line("P");
  std::mutex m;
  std::vector<std::shared_ptr<powercut_layer>> layers;
  bool off = false;
  const auto power_off_all = [&] {
    std::lock_guard<std::mutex> lock(m);
    off = true;
    for (auto& l : layers) l->power_off();
  };
  // --cut-at-write N: the power goes off as the N-th WRITE (of all the
  // layers) starts; that WRITE still lands, un-flushed.
  const std::uint64_t cut_at_write = a.count("cut-at-write");
  std::atomic<std::uint64_t> writes{0};
  crash::env run_env = e;
  run_env.open = [&](const std::string& path, const options& o) -> std::shared_ptr<controller> {
    const file_access access = o.writable ? file_access::read_write : file_access::read_only;
    auto file = std::make_shared<backing_file>(path, o.direct, access);
    auto layer = std::make_shared<powercut_layer>(file);
    layer->on_write([&] {
      if (writes.fetch_add(1) + 1 == cut_at_write) power_off_all();
    });
    {
      std::lock_guard<std::mutex> lock(m);
      if (off) layer->power_off();
      layers.push_back(layer);
    }
    if (o.controller == controller_kind::nvme_model) {
      // The device's own medium: the model consults the layer around its
      // writes and flushes, as the host controller does.
      nvme_model::config m;
      m.media = layer;
      return std::make_shared<nvme_controller>(file, o, o.line_size, m);
    }
    return std::make_shared<host_controller>(file, o, o.line_size, layer);
  };
  // --cut-after-us 0 with --cut-at-write: no cut by time (the power goes off
  // when the run ends, if the WRITE never came).
  const auto delay = microseconds(a.integer("cut-after-us"));
  const bool timed = delay.count() > 0 || cut_at_write == 0;
  std::atomic<bool> done{false};
  std::thread cutter([&] {
    const auto due = steady_clock::now() + delay;
    while (!done.load() && (!timed || steady_clock::now() < due)) std::this_thread::sleep_for(50us);
    power_off_all();
  });
  try {
    w->run(run_env, states, ack);
    out.line("F");
  } catch (const std::exception& ex) {
    // Expected once the power is off; anything before that is a failure.
    bool was_off;
    {
      std::lock_guard<std::mutex> lock(m);
      was_off = off;
    }
    if (!was_off) throw;
  }
  done = true;
  cutter.join();
  std::uint64_t reverted = 0;
  const double loss = a.real("loss");
  std::uint64_t i = 0;
  for (auto& l : layers) {
    if (l.use_count() != 1)
      throw runtime_error("the workload still holds a controller after run() ended");
    reverted += l->cut(e.seed * 1000 + i++, loss).reverted;
  }
  layers.clear();
  out.line("W " + std::to_string(writes.load()));
  const crash::verdict v = w->recover(e);
  out.line("V " + std::to_string(v.state) + " " + std::to_string(v.mismatches) + " " +
           std::to_string(reverted) + " " + one_line(v.detail));
  return 0;
}

// ---- parent side -------------------------------------------------------------

struct child_result {
  bool prepared = false, finished = false, verdict = false;
  std::uint64_t acked = 0;  // last acknowledged commit (0: none)
  std::uint64_t state = 0, mismatches = 0, reverted = 0;
  std::uint64_t writes = 0;  // powercut: WRITEs the layers saw ("W")
  std::string detail, device, error;
  int status = 0;  // waitpid status
  bool killed = false, timed_out = false;
  double seconds = 0;      // fork to exit
  double run_seconds = 0;  // "P" (prepared) to "F" (finished), when both came
};

// Runs this program as a child with `args`; kills it with SIGKILL `kill_after`
// after it reported "P" (or after it started, for recover children) when set.
child_result spawn(const std::vector<std::string>& args, std::optional<microseconds> kill_after,
                   seconds deadline) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> argv_s = {"/proc/self/exe"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  argv_s.push_back("--report-fd");
  argv_s.push_back(std::to_string(fds[1]));
  // Everything the child needs is built before fork(): other threads of the
  // parent (--jobs) may hold the allocator's locks at that instant.
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  const auto start = steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::fcntl(fds[1], F_SETFD, 0);  // the report fd survives exec
    // The child's own output goes to the parent's stderr.
    ::dup2(2, 1);
    ::execv("/proc/self/exe", argv.data());
    std::_Exit(127);
  }
  ::close(fds[1]);
  child_result r;
  std::string buf;
  std::optional<steady_clock::time_point> kill_at, prepared_at;
  if (kill_after && args.size() > 1 && args[1] == "recover") kill_at = start + *kill_after;
  bool open = true;
  while (open) {
    const auto now = steady_clock::now();
    if (kill_at && now >= *kill_at && !r.killed) {
      ::kill(pid, SIGKILL);
      r.killed = true;
    }
    if (now - start > deadline && !r.killed) {
      ::kill(pid, SIGKILL);
      r.killed = r.timed_out = true;
    }
    int wait_ms = 100;
    if (kill_at && !r.killed)
      wait_ms = static_cast<int>(std::clamp<long>(
          duration_cast<milliseconds>(*kill_at - now).count(), 0, 100));
    pollfd p{fds[0], POLLIN, 0};
    const int n = ::poll(&p, 1, wait_ms);
    if (n <= 0) continue;
    char tmp[4096];
    const ssize_t got = ::read(fds[0], tmp, sizeof tmp);
    if (got <= 0) {
      open = false;
      break;
    }
    buf.append(tmp, static_cast<std::size_t>(got));
    std::size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      const std::string l = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      std::istringstream in(l);
      std::string tag;
      in >> tag;
      if (tag == "P") {
        r.prepared = true;
        prepared_at = steady_clock::now();
        if (kill_after && !kill_at) kill_at = steady_clock::now() + *kill_after;
      } else if (tag == "A") {
        in >> r.acked;
      } else if (tag == "F") {
        r.finished = true;
        if (prepared_at) r.run_seconds = duration<double>(steady_clock::now() - *prepared_at).count();
      } else if (tag == "D") {
        std::getline(in >> std::ws, r.device);
      } else if (tag == "W") {
        in >> r.writes;
      } else if (tag == "V") {
        r.verdict = true;
        in >> r.state >> r.mismatches >> r.reverted;
        std::getline(in >> std::ws, r.detail);
      }
    }
  }
  ::close(fds[0]);
  ::waitpid(pid, &r.status, 0);
  r.seconds = duration<double>(steady_clock::now() - start).count();
  return r;
}

bool exited_ok(const child_result& r) {
  return !r.killed && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
}

struct tally {
  std::uint64_t trials = 0, bad = 0, lost = 0, inconsistent = 0, hangs = 0;
  std::uint64_t newer = 0;             // recovered the commit in flight at the crash
  std::uint64_t recover_killed = 0;    // kill trials whose first recovery was killed too
  std::uint64_t reverted_blocks = 0;   // power cut: blocks set back
  std::uint64_t reverting_cuts = 0;    // power cut: trials that set any block back
  std::uint64_t finished_before = 0;   // the crash came after the run ended
};

// Checks a recovery against the commits acknowledged; counts into t.
void judge(tally& t, const child_result& run, const child_result& rec, std::uint64_t states,
           const std::string& what) {
  ++t.trials;
  std::string problem;
  if (!rec.verdict || !exited_ok(rec)) {
    problem = rec.timed_out ? "recovery hung" : "recovery failed (exit status " +
                                                     std::to_string(rec.status) + ")";
    if (rec.timed_out) ++t.hangs;
    ++t.inconsistent;
  } else if (rec.mismatches != 0) {
    problem = std::to_string(rec.mismatches) + " mismatches in state " +
              std::to_string(rec.state) + ": " + rec.detail;
    ++t.inconsistent;
  } else if (rec.state < run.acked) {
    problem = "recovered state " + std::to_string(rec.state) + " but commit " +
              std::to_string(run.acked) + " was acknowledged";
    ++t.lost;
  } else if (rec.state > run.acked + 1 || rec.state > states) {
    problem = "recovered state " + std::to_string(rec.state) + ", beyond the commit in flight (" +
              std::to_string(run.acked + 1) + ")";
    ++t.inconsistent;
  }
  if (rec.state == run.acked + 1) ++t.newer;
  if (run.finished) ++t.finished_before;
  if (!problem.empty()) {
    ++t.bad;
    std::cerr << "  " << what << ": " << problem << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::arg_parser parser("warpstore-crash",
                           "kill -9 and power-cut trials of the durable workloads");
  parser.common()
      .option("workload", "NAMES", "all", "checkpoint, kv or all")
      .option("mode", "NAMES", "all", "kill, powercut or all")
      .option("trials", "N", "100", "trials per workload and mode")
      .option("states", "N", "40", "commits each run attempts")
      .option("jobs", "N", "1", "trials run at once")
      .option("dir", "PATH", "", "scratch directory (default: a new one under TMPDIR)")
      .option("json", "PATH", "", "merge crash.kill.recovered / crash.powercut.recovered here")
      .option("seed", "N", "1", "seed of the trial schedule")
      .option("child", "ROLE", "", "internal: run | recover | powercut")
      .option("report-fd", "FD", "-1", "internal")
      .option("cut-after-us", "US", "0", "internal")
      .option("loss", "P", "1", "internal")
      .option("cut-at-write", "N", "0", "internal");
  bench::parsed_args a;
  try {
    a = parser.parse(argc, argv);
    if (a.wants_help()) {
      std::cout << parser.help();
      return 0;
    }
    if (!a.str("child").empty()) return child_main(a);
  } catch (const std::exception& e) {
    std::cerr << "warpstore-crash: " << e.what() << "\n";
    return a.str("child").empty() ? 2 : 1;
  }

  try {
    std::vector<std::string> workloads = a.list("workload");
    if (workloads == std::vector<std::string>{"all"}) workloads = {"checkpoint", "kv"};
    std::vector<std::string> modes = a.list("mode");
    if (modes == std::vector<std::string>{"all"}) modes = {"kill", "powercut"};
    if (workload_options().controller == controller_kind::memory &&
        std::find(modes.begin(), modes.end(), "powercut") != modes.end())
      throw bench::usage_error("power-cut trials need a controller with a medium to cut (host "
                               "or nvme-model); the memory controller's writes live in host "
                               "memory until make_durable: run --mode kill");
    const std::uint64_t trials = a.count("trials"), states = a.count("states");
    const std::uint64_t jobs = std::max<std::uint64_t>(1, a.count("jobs"));
    std::string root = a.str("dir");
    if (root.empty()) {
      const char* t = std::getenv("TMPDIR");
      root = std::string(t ? t : "/tmp") + "/warpstore-crash-" + std::to_string(::getpid());
    }
    std::mt19937_64 rng(a.count("seed"));
    std::map<std::string, std::map<std::string, tally>> tallies;  // mode -> workload -> tally
    std::string device = "unknown";
    const seconds deadline(120);

    for (const std::string& wname : workloads) {
      // Calibration: one uninterrupted run, so crash instants cover all of it.
      const std::string cdir = root + "/" + wname + "-calibrate";
      fs::remove_all(cdir);
      fs::create_directories(cdir);
      const std::vector<std::string> base = {"--workload", wname, "--states",
                                             std::to_string(states)};
      auto args = [&](const std::string& role, const std::string& dir, std::uint64_t seed) {
        std::vector<std::string> v = {"--child", role, "--dir", dir, "--seed", std::to_string(seed)};
        v.insert(v.end(), base.begin(), base.end());
        return v;
      };
      const child_result cal = spawn(args("run", cdir, 1), std::nullopt, deadline);
      if (!exited_ok(cal) || !cal.finished || cal.acked != states)
        throw std::runtime_error(wname + ": the uninterrupted run failed (acknowledged " +
                                 std::to_string(cal.acked) + " of " + std::to_string(states) +
                                 " commits)");
      device = cal.device;
      const child_result crec = spawn(args("recover", cdir, 1), std::nullopt, deadline);
      if (!exited_ok(crec) || !crec.verdict || crec.state != states || crec.mismatches != 0)
        throw std::runtime_error(wname + ": recovery after a clean run found state " +
                                 std::to_string(crec.state) + " with " +
                                 std::to_string(crec.mismatches) + " mismatches: " + crec.detail);
      // Crash instants fall in the run phase; a recovery is killed from its
      // process start, so its whole life counts.
      const double run_s = cal.run_seconds > 0 ? cal.run_seconds : cal.seconds;
      const double run_us = run_s * 1e6, rec_us = crec.seconds * 1e6;
      std::cout << wname << ": an uninterrupted run of " << states << " commits takes "
                << run_s << " s (process " << cal.seconds << " s), recovery " << crec.seconds
                << " s\n";
      fs::remove_all(cdir);
      // The WRITEs of an uninterrupted run over the power-cut layers (no cut),
      // so cuts at a WRITE can be drawn among them.
      std::uint64_t run_writes = 0;
      if (std::find(modes.begin(), modes.end(), "powercut") != modes.end()) {
        fs::create_directories(cdir);
        std::vector<std::string> v = args("powercut", cdir, 1);
        v.insert(v.end(),
                 {"--cut-after-us", "0", "--cut-at-write", std::to_string(~std::uint64_t{0})});
        const child_result wc = spawn(v, std::nullopt, deadline);
        if (!exited_ok(wc) || !wc.verdict || wc.acked != states || wc.state != states ||
            wc.writes == 0)
          throw std::runtime_error(wname +
                                   ": the uninterrupted run over the power-cut layer failed "
                                   "(acknowledged " +
                                   std::to_string(wc.acked) + ", recovered state " +
                                   std::to_string(wc.state) + ", " + std::to_string(wc.writes) +
                                   " WRITEs): " + wc.detail);
        run_writes = wc.writes;
        std::cout << wname << ": an uninterrupted run makes " << run_writes << " WRITEs\n";
        fs::remove_all(cdir);
      }

      for (const std::string& mode : modes) {
        tally& t = tallies[mode][wname];
        struct plan {
          std::uint64_t seed;
          microseconds at, recover_at;
          std::uint64_t write;  // powercut, odd trials: cut as this WRITE starts
        };
        std::vector<plan> plans(trials);
        for (plan& p : plans) {
          p.seed = rng() % 1000000 + 1;
          p.at = microseconds(static_cast<long>(std::uniform_real_distribution<double>(0, run_us)(rng)));
          p.write = run_writes ? rng() % run_writes + 1 : 0;
          p.recover_at =
              microseconds(static_cast<long>(std::uniform_real_distribution<double>(0, rec_us)(rng)));
        }
        std::mutex tally_mutex;
        std::atomic<std::uint64_t> next{0};
        std::exception_ptr failure;
        auto trial = [&](std::uint64_t i) {
          const plan& p = plans[i];
          const std::string dir = root + "/" + wname + "-" + mode + "-" + std::to_string(i);
          fs::remove_all(dir);
          fs::create_directories(dir);
          const std::string what = wname + " " + mode + " trial " + std::to_string(i);
          if (mode == "kill") {
            const child_result run = spawn(args("run", dir, p.seed), p.at, deadline);
            if (!run.prepared) {
              std::lock_guard<std::mutex> lock(tally_mutex);
              std::cerr << "  " << what << ": prepare did not finish\n";
              ++t.trials, ++t.bad, ++t.inconsistent;
              t.hangs += run.timed_out;
              return;
            }
            bool first_killed = false;
            if (i % 2 == 1) {
              // Kill the first recovery too, at a random instant; the second must still work.
              const child_result first = spawn(args("recover", dir, p.seed), p.recover_at, deadline);
              first_killed = first.killed && !first.timed_out;
            }
            const child_result rec = spawn(args("recover", dir, p.seed), std::nullopt, deadline);
            std::lock_guard<std::mutex> lock(tally_mutex);
            t.hangs += run.timed_out;
            t.recover_killed += first_killed;
            judge(t, run, rec, states, what);
          } else {
            std::vector<std::string> v = args("powercut", dir, p.seed);
            const double losses[] = {1.0, 0.5, 0.1};
            const bool at_write = i % 2 == 1 && p.write != 0;
            v.insert(v.end(), {"--cut-after-us", at_write ? "0" : std::to_string(p.at.count()),
                               "--cut-at-write", at_write ? std::to_string(p.write) : "0", "--loss",
                               std::to_string(losses[i % 3])});
            const child_result run = spawn(v, std::nullopt, deadline);
            std::lock_guard<std::mutex> lock(tally_mutex);
            t.hangs += run.timed_out;
            t.reverted_blocks += run.reverted;
            t.reverting_cuts += run.reverted != 0;
            judge(t, run, run, states, what);
          }
          fs::remove_all(dir);
        };
        auto worker = [&] {
          for (std::uint64_t i; (i = next.fetch_add(1)) < trials;) {
            try {
              trial(i);
            } catch (...) {
              std::lock_guard<std::mutex> lock(tally_mutex);
              if (!failure) failure = std::current_exception();
              next = trials;
            }
          }
        };
        std::vector<std::thread> pool;
        for (std::uint64_t j = 1; j < jobs; ++j) pool.emplace_back(worker);
        worker();
        for (auto& th : pool) th.join();
        if (failure) std::rethrow_exception(failure);
        std::cout << wname << " " << mode << ": " << t.trials << " trials, " << t.bad
                  << " bad (lost commits " << t.lost << ", inconsistent " << t.inconsistent
                  << ", hangs " << t.hangs << "); recovered the commit in flight " << t.newer
                  << " times";
        if (mode == "kill") std::cout << "; first recovery killed " << t.recover_killed << " times";
        if (mode == "powercut")
          std::cout << "; blocks reverted " << t.reverted_blocks << " (in " << t.reverting_cuts
                    << " trials)";
        std::cout << "; the crash came after the last commit " << t.finished_before << " times";
        std::cout << "\n";
      }
    }
    fs::remove_all(root);

    std::vector<bench::result> results;
    std::uint64_t failures = 0;
    for (auto& [mode, per] : tallies) {
      bench::result r;
      r.name = "crash." + mode + ".recovered";
      r.unit = "trials";
      r.verified = true;
      for (auto& [wname, t] : per) {
        r.value += static_cast<double>(t.trials);
        r.mismatches += t.bad;
        bench::json::object p;
        p.push_back({"trials", t.trials});
        p.push_back({"lost_commits", t.lost});
        p.push_back({"inconsistent", t.inconsistent});
        p.push_back({"hangs", t.hangs});
        p.push_back({"recovered_commit_in_flight", t.newer});
        if (mode == "kill")
          p.push_back({"first_recovery_killed", t.recover_killed});
        else {
          p.push_back({"blocks_reverted", t.reverted_blocks});
          p.push_back({"trials_that_reverted_blocks", t.reverting_cuts});
          p.push_back(
              {"cuts", "even trials at a random instant, odd ones as a random WRITE starts"});
        }
        p.push_back({"crash_after_last_commit", t.finished_before});
        r.params.push_back({wname, bench::json::value(std::move(p))});
      }
      r.params.push_back({"states_per_run", states});
      failures += r.mismatches;
      results.push_back(std::move(r));
    }
    std::cout << bench::results_table(results);
    if (!a.str("json").empty())
      bench::write_results(a.str("json"), bench::run_info::now("durability", device, a.command_line()),
                           results);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "warpstore-crash: " << e.what() << "\n";
    return 1;
  }
}
