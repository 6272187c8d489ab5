// CPU tests of the support library: argument and size parsing, the results
// file (RESULTS.md format, merging), traces, zipf and the pattern-file helpers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "support/args.h"
#include "support/files.h"
#include "support/json.h"
#include "support/pattern_file.h"
#include "support/results.h"
#include "support/table.h"
#include "support/trace.h"
#include "test_files.h"
#include "support/zipf.h"

namespace wb = warpstore::bench;
namespace json = warpstore::bench::json;

namespace {

using warpstore::test::temp_dir;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

wb::arg_parser make_parser() {
  wb::arg_parser p("prog", "test program");
  p.common().option("json", "PATH", "out.json", "results file");
  p.add_command("block", "raw I/O")
      .option("threads", "N", "1K", "threads")
      .option("request", "BYTES", "4K", "request size")
      .option("pattern", "P", "random", "access pattern")
      .option("ratio", "X", "0.5", "a real")
      .flag("fresh", "start over");
  p.add_command("ceilings", "ceilings only").option("cpu-threads", "LIST", "1,4,8", "threads");
  return p;
}

}  // namespace

// ---- sizes and arguments --------------------------------------------------------

TEST(ParseSize, PlainAndSuffixed) {
  EXPECT_EQ(wb::parse_size("4096"), 4096u);
  EXPECT_EQ(wb::parse_size("4K"), 4096u);
  EXPECT_EQ(wb::parse_size("4k"), 4096u);
  EXPECT_EQ(wb::parse_size("4KB"), 4096u);
  EXPECT_EQ(wb::parse_size("4KiB"), 4096u);
  EXPECT_EQ(wb::parse_size("64M"), 64ull << 20);
  EXPECT_EQ(wb::parse_size("16GiB"), 16ull << 30);
  EXPECT_EQ(wb::parse_size("1.5G"), 3ull << 29);
  EXPECT_EQ(wb::parse_size("1M"), 1048576u);
  EXPECT_EQ(wb::parse_size("2T"), 2ull << 40);
  EXPECT_EQ(wb::parse_size("512B"), 512u);
  EXPECT_EQ(wb::parse_size(" 8 MiB "), 8ull << 20);
}

TEST(ParseSize, RejectsGarbage) {
  for (const char* bad : {"", "K", "-4K", "4X", "4KK", "1.2.3M", "0.3", "99999999999999999999",
                          "16777216T"})
    EXPECT_THROW(wb::parse_size(bad), wb::usage_error) << bad;
}

TEST(FormatSize, Units) {
  EXPECT_EQ(wb::format_size(512), "512 B");
  EXPECT_EQ(wb::format_size(4096), "4 KiB");
  EXPECT_EQ(wb::format_size(3ull << 29), "1.50 GiB");
  EXPECT_EQ(wb::format_size(16ull << 30), "16 GiB");
}

TEST(Args, DefaultsAndValues) {
  const auto p = make_parser();
  const auto a = p.parse({"block", "--threads", "1M", "--request=64K", "--fresh"});
  EXPECT_EQ(a.command(), "block");
  EXPECT_EQ(a.count("threads"), 1048576u);
  EXPECT_EQ(a.size("request"), 65536u);
  EXPECT_TRUE(a.flag("fresh"));
  EXPECT_TRUE(a.given("threads"));
  EXPECT_FALSE(a.given("pattern"));
  EXPECT_EQ(a.str("pattern"), "random");
  EXPECT_EQ(a.str("json"), "out.json");  // common option, defaulted
  EXPECT_DOUBLE_EQ(a.real("ratio"), 0.5);
  EXPECT_EQ(a.choice("pattern", {"random", "sequential"}), "random");
  EXPECT_EQ(a.command_line(), "prog block --threads 1M --request=64K --fresh");
}

TEST(Args, CommonOptionAfterCommand) {
  const auto a = make_parser().parse({"ceilings", "--json", "x y.json", "--cpu-threads", "1, 2,,3"});
  EXPECT_EQ(a.str("json"), "x y.json");
  EXPECT_EQ(a.list("cpu-threads"), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(a.command_line(), "prog ceilings --json 'x y.json' --cpu-threads '1, 2,,3'");
}

TEST(Args, Errors) {
  const auto p = make_parser();
  EXPECT_THROW(p.parse({"block", "--nope", "1"}), wb::usage_error);
  EXPECT_THROW(p.parse({"block", "--threads"}), wb::usage_error);            // no value
  EXPECT_THROW(p.parse({"block", "--fresh=1"}), wb::usage_error);            // flag with a value
  EXPECT_THROW(p.parse({"blok"}), wb::usage_error);                          // unknown command
  EXPECT_THROW(p.parse({}), wb::usage_error);                                // no command
  EXPECT_THROW(p.parse({"block", "stray"}), wb::usage_error);                // extra positional
  EXPECT_THROW(p.parse({"ceilings", "--threads", "4"}), wb::usage_error);    // other command's option
  EXPECT_THROW(p.parse({"block", "-t", "4"}), wb::usage_error);
  try {
    p.parse({"block", "--thread", "4"});
    FAIL();
  } catch (const wb::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("--thread"), std::string::npos);
  }
  const auto a = p.parse({"block", "--threads", "lots", "--pattern", "zigzag"});
  EXPECT_THROW(a.count("threads"), wb::usage_error);
  EXPECT_THROW(a.choice("pattern", {"random", "sequential"}), wb::usage_error);
  EXPECT_THROW(a.str("undeclared"), std::logic_error);
}

TEST(Args, HelpListsOptions) {
  const auto p = make_parser();
  EXPECT_TRUE(p.parse({"block", "--help"}).wants_help());
  EXPECT_TRUE(p.parse({"-h"}).wants_help());
  const std::string top = p.help();
  EXPECT_NE(top.find("block"), std::string::npos);
  EXPECT_NE(top.find("ceilings"), std::string::npos);
  const std::string h = p.help("block");
  for (const char* s : {"--threads N", "--request BYTES", "[default: 4K]", "--fresh", "--json PATH"})
    EXPECT_NE(h.find(s), std::string::npos) << s << "\n" << h;
}

TEST(Args, SingleCommandWithPositionals) {
  wb::arg_parser p("gen", "generator");
  p.common().positional("PATH", "file").positional("SIZE", "bytes", false).option("seed", "N", "0", "seed").flag("check", "verify");
  const auto a = p.parse({"/tmp/f", "64M", "--seed", "7"});
  EXPECT_EQ(a.positional("PATH"), "/tmp/f");
  EXPECT_EQ(wb::parse_size(a.positional("SIZE")), 64ull << 20);
  EXPECT_EQ(a.integer("seed"), 7);
  const auto b = p.parse({"/tmp/f", "--check"});
  EXPECT_EQ(b.positional("SIZE"), "");
  EXPECT_TRUE(b.flag("check"));
  EXPECT_THROW(p.parse({"--check"}), wb::usage_error);  // PATH missing
  EXPECT_NE(p.help().find("PATH [SIZE]"), std::string::npos);
}

// ---- JSON and results ------------------------------------------------------------

TEST(Json, RoundTrip) {
  const std::string text =
      R"({"a": [1, -2, 3.5, 1e3, true, false, null], "s": "q\"\\\n\u00e9\ud83d\ude00", "o": {}})";
  const json::value v = json::value::parse(text);
  EXPECT_EQ(v.find("a")->as_array()[1].as_integer(), -2);
  EXPECT_DOUBLE_EQ(v.find("a")->as_array()[3].as_number(), 1000.0);
  EXPECT_EQ(v.find("s")->as_string(), "q\"\\\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(json::value::parse(v.dump()), v);
  EXPECT_EQ(json::value::parse(v.dump(0)), v);
  for (const char* bad : {"{", "[1,]", "{\"a\" 1}", "tru", "\"abc", "1 2", "{\"a\":1,}"})
    EXPECT_THROW(json::value::parse(bad), json::parse_error) << bad;
}

TEST(Json, NonFiniteBecomesNull) {
  json::value v = json::object_builder().add("x", std::nan("")).done();
  EXPECT_EQ(v.dump(0), "{\"x\": null}");
}

namespace {
wb::result sample_result(const std::string& name, double value, double ceiling) {
  wb::result r;
  r.name = name;
  r.value = value;
  r.unit = "GB/s";
  r.ceiling = ceiling;
  r.ceiling_name = "pinned-memory random 4 KiB copy kernel";
  r.verified = true;
  r.mismatches = 0;
  r.params = json::object_builder().add("threads", 1048576).add("pattern", "random").done();
  return r;
}

// Every field RESULTS.md names, with its JSON type.
void expect_results_format(const json::value& doc) {
  ASSERT_TRUE(doc.is_object());
  const std::vector<std::string> keys = {"study", "device", "date", "commit", "command", "results"};
  ASSERT_EQ(doc.as_object().size(), keys.size());
  for (std::size_t k = 0; k < keys.size(); ++k) EXPECT_EQ(doc.as_object()[k].key, keys[k]);
  for (const char* k : {"study", "device", "date", "commit", "command"})
    EXPECT_TRUE(doc.find(k)->is_string()) << k;
  const std::string& date = doc.find("date")->as_string();
  ASSERT_EQ(date.size(), 10u);
  EXPECT_EQ(date[4], '-');
  EXPECT_EQ(date[7], '-');
  for (const json::value& r : doc.find("results")->as_array()) {
    const std::vector<std::string> rk = {"name",  "value",    "unit",       "ceiling", "ceiling_name",
                                         "ratio", "verified", "mismatches", "params"};
    ASSERT_EQ(r.as_object().size(), rk.size());
    for (std::size_t k = 0; k < rk.size(); ++k) EXPECT_EQ(r.as_object()[k].key, rk[k]);
    EXPECT_TRUE(r.find("name")->is_string());
    EXPECT_TRUE(r.find("value")->is_number());
    EXPECT_TRUE(r.find("unit")->is_string());
    EXPECT_TRUE(r.find("ceiling")->is_number() || r.find("ceiling")->is_null());
    EXPECT_TRUE(r.find("ratio")->is_number() || r.find("ratio")->is_null());
    EXPECT_TRUE(r.find("verified")->is_bool());
    EXPECT_TRUE(r.find("mismatches")->is_integer());
    EXPECT_TRUE(r.find("params")->is_object());
  }
}
}  // namespace

TEST(Results, RatioAndNulls) {
  const wb::result r = sample_result("a", 44.1, 51.0);
  ASSERT_TRUE(r.ratio());
  EXPECT_NEAR(*r.ratio(), 0.8647, 1e-9);
  wb::result c = r;
  c.ceiling.reset();
  EXPECT_FALSE(c.ratio());
  const json::value j = c.to_json();
  EXPECT_TRUE(j.find("ceiling")->is_null());
  EXPECT_TRUE(j.find("ceiling_name")->is_null());
  EXPECT_TRUE(j.find("ratio")->is_null());
}

TEST(Results, MergeKeepsReplacesAppends) {
  temp_dir dir;
  const std::string path = dir / "results/core.json";  // directory created on write
  wb::run_info run{"core", "NVIDIA H200", "2026-11-21", "abc", "bench block"};
  wb::write_results(path, run, {sample_result("one", 1, 2), sample_result("two", 2, 4)});
  run.command = "bench ceilings";
  const json::value doc =
      wb::write_results(path, run, {sample_result("two", 3, 4), sample_result("three", 5, 10)});
  const json::value reread = json::value::parse(read_text(path));
  EXPECT_EQ(reread, doc);
  expect_results_format(reread);
  const auto& rs = reread.find("results")->as_array();
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[0].find("name")->as_string(), "one");
  EXPECT_EQ(rs[1].find("name")->as_string(), "two");
  EXPECT_DOUBLE_EQ(rs[1].find("value")->as_number(), 3.0);
  EXPECT_DOUBLE_EQ(rs[1].find("ratio")->as_number(), 0.75);
  EXPECT_EQ(rs[2].find("name")->as_string(), "three");
  EXPECT_EQ(reread.find("study")->as_string(), "core");
  EXPECT_EQ(reread.find("command")->as_string(), "bench block && bench ceilings");
  // The same command again is not repeated.
  wb::write_results(path, run, {sample_result("three", 6, 10)});
  EXPECT_EQ(json::value::parse(read_text(path)).find("command")->as_string(),
            "bench block && bench ceilings");
  // A run that replaces every entry names its own command alone, and a
  // duplicate name within one run does not count as an earlier entry.
  run.command = "/tmp/other-build/bench all";
  wb::write_results(path, run,
                    {sample_result("one", 7, 10), sample_result("two", 8, 10),
                     sample_result("three", 9, 10), sample_result("four", 1, 10),
                     sample_result("four", 2, 10)});
  const json::value all = json::value::parse(read_text(path));
  EXPECT_EQ(all.find("command")->as_string(), "/tmp/other-build/bench all");
  EXPECT_EQ(all.find("results")->as_array().size(), 4u);
  // Leaving one earlier entry keeps the earlier command beside the new one.
  run.command = "bench some";
  wb::write_results(path, run, {sample_result("one", 1, 10)});
  EXPECT_EQ(json::value::parse(read_text(path)).find("command")->as_string(),
            "/tmp/other-build/bench all && bench some");
}

TEST(Results, RefusesToClobberInvalidFile) {
  temp_dir dir;
  const std::string path = dir / "core.json";
  std::ofstream(path) << "{ not json";
  wb::run_info run{"core", "dev", "2026-11-21", "abc", "cmd"};
  EXPECT_THROW(wb::write_results(path, run, {sample_result("x", 1, 1)}), std::runtime_error);
  EXPECT_EQ(read_text(path), "{ not json");
}

TEST(Results, RunInfoHeader) {
  ::setenv("WARPSTORE_COMMIT", "0123456789abcdef0123456789abcdef01234567", 1);
  const wb::run_info r = wb::run_info::now("core", "CPU", "bench x");
  ::unsetenv("WARPSTORE_COMMIT");
  EXPECT_EQ(r.commit, "0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(r.date, wb::utc_date());
  EXPECT_EQ(r.command, "bench x");
  EXPECT_EQ(wb::study_of("bench/results/core.json"), "core");
  const std::string c = wb::current_commit("/nonexistent-dir");
  EXPECT_EQ(c, "unknown");
}

TEST(Table, AlignsColumns) {
  wb::table t({"name", "value"});
  t.add({"block.host", "12.5"});
  t.add({"x", "1234.25"});
  const std::string s = t.str();
  EXPECT_EQ(s,
            "name          value\n"
            "----------  -------\n"
            "block.host     12.5\n"
            "x           1234.25\n");
}

// ---- traces and zipf ---------------------------------------------------------------

TEST(Trace, UniformIsDeterministicInRangeAndSpread) {
  const auto t = wb::trace::uniform(42, 1000);
  const auto u = wb::trace::uniform(43, 1000);
  std::vector<int> hist(10, 0);
  int same = 0;
  for (std::uint64_t i = 0; i < 100000; ++i) {
    const std::uint64_t b = t.index(i);
    ASSERT_LT(b, 1000u);
    EXPECT_EQ(b, t.index(i));
    ++hist[b / 100];
    same += b == u.index(i);
  }
  for (int h : hist) EXPECT_NEAR(h, 10000, 600);
  EXPECT_LT(same, 300);  // another seed is another trace
  const auto s = wb::trace::sequential(7);
  EXPECT_EQ(s.index(0), 0u);
  EXPECT_EQ(s.index(8), 1u);
}

TEST(Zipf, FollowsPowerLaw) {
  const std::uint64_t n = 1000;
  const double exponent = 0.99;
  const wb::zipf_generator z(n, exponent, 7, /*scatter=*/false);
  const std::uint64_t samples = 1000000;
  std::vector<std::uint64_t> counts(n + 1, 0);
  for (std::uint64_t i = 0; i < samples; ++i) {
    const std::uint64_t r = z.rank(i);
    ASSERT_GE(r, 1u);
    ASSERT_LE(r, n);
    ++counts[r];
  }
  double norm = 0;
  for (std::uint64_t k = 1; k <= n; ++k) norm += std::pow(static_cast<double>(k), -exponent);
  for (std::uint64_t k : {1, 2, 3, 5, 10, 50}) {
    const double expected = samples * std::pow(static_cast<double>(k), -exponent) / norm;
    EXPECT_NEAR(counts[k], expected, 5 * std::sqrt(expected) + 0.01 * expected) << "rank " << k;
  }
  // Exponent 1 and a large n go through the series branches of the helpers.
  const wb::zipf_generator big(std::uint64_t{1} << 32, 1.0, 3);
  for (std::uint64_t i = 0; i < 1000; ++i) ASSERT_LT(big.index(i), std::uint64_t{1} << 32);
}

TEST(Zipf, ScatterIsABijectionAndFillMatchesIndex) {
  const std::uint64_t n = 1000;
  const wb::zipf_generator z(n, 1.2, 5);
  std::set<std::uint64_t> seen;
  for (std::uint64_t r = 1; r <= n; ++r) seen.insert(z.block_of_rank(r));
  EXPECT_EQ(seen.size(), n);
  EXPECT_EQ(*seen.rbegin(), n - 1);
  const auto v = z.indices(300000, 3);
  for (std::uint64_t i = 0; i < v.size(); i += 997) EXPECT_EQ(v[i], z.index(i));
  EXPECT_EQ(wb::zipf_generator(n, 1.2, 5).index(12345), z.index(12345));
  EXPECT_THROW(wb::zipf_generator(0, 1.0, 1), std::invalid_argument);
  EXPECT_THROW(wb::zipf_generator(10, 0.0, 1), std::invalid_argument);
}

// ---- pattern files ---------------------------------------------------------------

TEST(PatternFile, FillAndCountAtAnyAlignment) {
  std::vector<unsigned char> buf(1000);
  for (std::uint64_t off : {0ull, 3ull, 8ull, 4093ull}) {
    warpstore::tools::fill_buffer(buf.data(), off, buf.size(), 9);
    EXPECT_EQ(warpstore::tools::count_mismatches(buf.data(), off, buf.size(), 9), 0u);
    for (std::size_t k = 0; k < buf.size(); ++k)
      ASSERT_EQ(buf[k], warpstore::tools::pattern_byte(off + k, 9));
    EXPECT_GT(warpstore::tools::count_mismatches(buf.data(), off, buf.size(), 10), 100u);
    buf[500] ^= 1;
    buf[501] ^= 1;  // same or adjacent word: at most two words
    const auto bad = warpstore::tools::count_mismatches(buf.data(), off, buf.size(), 9);
    EXPECT_GE(bad, 1u);
    EXPECT_LE(bad, 2u);
    EXPECT_EQ(warpstore::tools::first_mismatch(buf.data(), off, buf.size(), 9), off + 500);
  }
}

TEST(PatternFile, WriteCheckEnsure) {
  temp_dir dir;
  const std::string path = dir / "data.bin";
  const std::uint64_t size = (20ull << 20) + 24;  // several chunks and a partial word
  warpstore::tools::write_pattern_file(path, size, 3, 3, {}, false);
  EXPECT_EQ(wb::file_bytes(path), size);
  auto r = warpstore::tools::check_pattern_file(path, 3, 2);
  EXPECT_EQ(r.bytes, size);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(warpstore::tools::check_pattern_file(path, 4, 2).first_bad_offset, 0u);
  EXPECT_EQ(wb::ensure_pattern_file(path, 0, 3), size);
  EXPECT_THROW(wb::ensure_pattern_file(path, 0, 4), std::runtime_error);             // other seed
  EXPECT_THROW(wb::ensure_pattern_file(path, 4096, 3, true), std::runtime_error);    // other size
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(9 << 20);
    f.put('\x55');
  }
  r = warpstore::tools::check_pattern_file(path, 3, 2);
  EXPECT_EQ(r.mismatches, 1u);
  EXPECT_EQ(r.first_bad_offset, 9u << 20);
  const std::string fresh = dir / "sub/new.bin";
  EXPECT_EQ(wb::ensure_pattern_file(fresh, 1 << 20, 11), 1u << 20);
  EXPECT_EQ(warpstore::tools::check_pattern_file(fresh, 11, 1).mismatches, 0u);
  EXPECT_GE(wb::warm_page_cache(fresh, 2), 0.0);
}
