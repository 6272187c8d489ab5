// The reliability study's driver, shared by the CPU and GPU programs.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>

#include "bench/reliability/reliability.h"
#include "support/pattern_file.h"
#include "support/setting_options.h"

namespace warpstore::reliability {

namespace {

bench::arg_parser make_parser(const target& t) {
  bench::arg_parser p("warpstore-reliability-" + t.name,
                      "fault injection, hostile inputs and protocol checks");
  bench::command_spec& c = p.common();
  c.option("json", "PATH", WARPSTORE_SOURCE_DIR "/bench/results/reliability.json",
           "results file (merged)")
      .option("dir", "DIR", "/tmp", "where scratch files go")
      .option("file-size", "BYTES", "8M", "size of the fault scenarios' file")
      .option("reads", "N", "16K", "random element reads per fault scenario");
  // Library settings, from the settings table (flags, syntax, range checks).
  bench::declare_options(
      c, {{"cache_bytes", "256K", "cache of the fault scenarios (1/32 of the file)"},
          {"timeout_ns", "3000", "deadline of every wait in the fault scenarios and, 4 times it, "
                                 "of the read/write soak"}});
  c.option("kinds", "LIST", "io_error,short_transfer,stall,delay,reorder,thread_death",
              "fault kinds to inject")
      .option("model-states", "N", "0", "states Spin explored (scripts/reliability.sh)")
      .option("model-depths", "TEXT", "", "queue depths and threads the model covered")
      .option("chaos-seeds", "N", "0", "seeds of the perturbed-atomics protocol test that passed")
      .option("sanitizer-runs", "LIST", "", "sanitizer runs that came back clean")
      .option("fuzz-inputs", "N", "0", "random submission entries the fuzz loop fed")
      .option("fuzz-execs", "N", "0", "inputs the libFuzzer target ran (0: not run)")
      .option("fuzz-failures", "N", "0", "inputs the libFuzzer target failed on (crash, leak, "
              "hang, wrong completion)")
      .option("fuzz-seconds", "S", "0", "how long the libFuzzer target ran")
      .option("fuzz-corpus", "N", "0", "inputs in the libFuzzer corpus at the end")
      .option("python-cases", "PATH", "", "hostile inputs tried from Python "
              "(scripts/python_hostile.py output)")
      .flag("no-hostile", "skip the hostile inputs")
      .flag("no-json", "print only");
  if (t.extra_options) t.extra_options(c);
  return p;
}

// scenario_options with --cache-bytes and --timeout-ms (not the environment:
// the scenarios are the same everywhere).
options fault_options(const bench::parsed_args& args) {
  const options o = bench::apply_options(args, options{});
  return scenario_options(o.cache_bytes, 4, 2, o.timeout_ns);
}

bench::result count_entry(const std::string& name, double value, const std::string& unit,
                          bench::json::object params) {
  bench::result r;
  r.name = name;
  r.value = value;
  r.unit = unit;
  r.verified = true;
  r.params = std::move(params);
  return r;
}

// Entries for the checks run outside this program, so the study has them in
// one file.
void protocol_entries(const bench::parsed_args& args, std::vector<bench::result>& out) {
  using bench::json::object_builder;
  if (args.count("model-states") > 0)
    out.push_back(count_entry("protocol.model", static_cast<double>(args.count("model-states")),
                              "states",
                              object_builder()
                                  .add("checker", "spin")
                                  .add("covered", args.str("model-depths"))
                                  .add("properties", "no lost or doubled command, no deadlock")
                                  .done()));
  if (args.count("chaos-seeds") > 0)
    out.push_back(count_entry("protocol.perturbed", static_cast<double>(args.count("chaos-seeds")),
                              "seeds",
                              object_builder()
                                  .add("how", "random yields and sleeps before every atomic step "
                                              "of the queue and cache protocol (CPU target)")
                                  .done()));
  const auto sanitizers = args.list("sanitizer-runs");
  if (!sanitizers.empty()) {
    bench::json::array runs;
    for (const auto& s : sanitizers) runs.push_back(s);
    out.push_back(count_entry("sanitizers.clean_runs", static_cast<double>(sanitizers.size()),
                              "runs", object_builder().add("runs", std::move(runs)).done()));
  }
  if (args.count("fuzz-inputs") > 0)
    out.push_back(count_entry("fuzz.random_entries", static_cast<double>(args.count("fuzz-inputs")),
                              "commands",
                              object_builder()
                                  .add("how", "a deterministic loop of random submission entries "
                                              "fed to the host controller; every one completed, "
                                              "good reads delivered the file's bytes")
                                  .done()));
  if (args.count("fuzz-execs") > 0) {
    bench::result r = count_entry(
        "fuzz.submissions", static_cast<double>(args.count("fuzz-execs")), "executions",
        object_builder()
            .add("how", "libFuzzer (clang -fsanitize=fuzzer,address,undefined, "
                        "tests/fuzz/submission_fuzzer.cpp): arbitrary submission entries and "
                        "doorbell values fed to a fresh host controller per input; every "
                        "command rung gets exactly one completion, success exactly for valid "
                        "ones, good reads deliver the file's bytes, bad doorbells are reported")
            .add("failures", args.count("fuzz-failures"))
            .add("seconds", args.real("fuzz-seconds"))
            .add("corpus", args.count("fuzz-corpus"))
            .done());
    r.mismatches = args.count("fuzz-failures");
    out.push_back(std::move(r));
  }
}

bool healthy(const bench::result& r) {
  if (r.mismatches != 0) return false;
  const bench::json::value params(r.params);
  if (const auto* h = params.find("hangs"); h && h->as_integer() != 0) return false;
  if (r.name.rfind("fault.", 0) == 0) {
    const auto* d = params.find("detected");
    const auto* re = params.find("reopened");
    return d && d->as_integer() == static_cast<std::int64_t>(r.value) && re && re->as_bool();
  }
  if (r.name.rfind("soak.readwrite", 0) == 0) {
    for (const char* key : {"errors", "failed_ops", "failed_device_flushes", "model_disagreements"})
      if (const auto* v = params.find(key); !v || v->as_integer() != 0) return false;
  }
  return true;
}

}  // namespace

int run_study(int argc, char** argv, const target& t) {
  const bench::arg_parser parser = make_parser(t);
  bench::parsed_args args;
  try {
    args = parser.parse(argc, argv);
  } catch (const bench::usage_error& e) {
    std::fprintf(stderr, "%s\n%s", e.what(), parser.help().c_str());
    return 2;
  }
  if (args.wants_help()) {
    std::cout << parser.help();
    return 0;
  }
  std::vector<bench::result> results;

  const std::string dir = args.str("dir");
  const std::string path = dir + "/warpstore-reliability-" + t.name + ".bin";
  tools::write_pattern_file(path, args.size("file-size"), 0, 4, {}, false);
  fault_setup s{path, fault_options(args), args.count("reads"), 7};
  for (const auto& k : args.list("kinds")) {
    const fault_outcome o = run_fault(parse_fault_kind(k), s, t.read);
    std::printf("fault %-15s injected %-5llu detected %-5llu hangs %llu wrong %llu  %.2f s  %s\n",
                k.c_str(), static_cast<unsigned long long>(o.injected),
                static_cast<unsigned long long>(o.detected),
                static_cast<unsigned long long>(o.hangs),
                static_cast<unsigned long long>(o.mismatches), o.seconds, o.message.c_str());
    results.push_back(fault_result(o, t.name));
  }
  std::filesystem::remove(path);

  if (!args.flag("no-hostile")) {
    auto cases = run_hostile(dir, t.read, t.write, t.gpu);
    if (!t.gpu) {
      // dtype and shape from Python: tried by scripts/python_hostile.py
      // where the package is installed (the CPU machine; CI).
      auto py = read_hostile_cases(args.str("python-cases"), "dtype/shape mismatch from Python");
      cases.insert(cases.end(), py.begin(), py.end());
    }
    for (const auto& c : cases)
      std::printf("hostile %-55s %s  %s\n", c.name.c_str(),
                  c.skipped ? "skipped" : (c.refused_cleanly ? "refused" : "NOT REFUSED"),
                  c.message.c_str());
    results.push_back(hostile_result(cases, t.name));
  }
  if (t.extra) {
    auto more = t.extra(args);
    results.insert(results.end(), more.begin(), more.end());
  }
  protocol_entries(args, results);

  std::cout << "\n" << bench::results_table(results);
  if (!args.flag("no-json")) {
    bench::write_results(args.str("json"),
                         bench::run_info::now("reliability", t.device, args.command_line()),
                         results);
    std::cout << "results merged into " << args.str("json") << "\n";
  }
  int rc = 0;
  for (const auto& r : results)
    if (!healthy(r)) {
      std::fprintf(stderr, "reliability: %s is not clean\n", r.name.c_str());
      rc = 1;
    }
  return rc;
}

int study_main(int argc, char** argv, const char* program, const std::function<target()>& make) {
  try {
    return run_study(argc, argv, make());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 3;
  }
}

}  // namespace warpstore::reliability
