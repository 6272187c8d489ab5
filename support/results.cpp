#include "support/results.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "support/args.h"
#include "support/table.h"

namespace warpstore::bench {

double round_significant(double v, int digits) {
  if (!std::isfinite(v) || v == 0) return v;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return std::strtod(buf, nullptr);
}

std::optional<double> result::ratio() const {
  if (!ceiling || !(*ceiling > 0) || !std::isfinite(value)) return std::nullopt;
  return std::round(value / *ceiling * 10000.0) / 10000.0;
}

json::value result::to_json() const {
  const auto r = ratio();
  return json::object_builder()
      .add("name", name)
      .add("value", round_significant(value, 7))
      .add("unit", unit)
      .add("ceiling", ceiling ? json::value(round_significant(*ceiling, 7)) : json::value())
      .add("ceiling_name", ceiling ? json::value(ceiling_name) : json::value())
      .add("ratio", r ? json::value(*r) : json::value())
      .add("verified", verified)
      .add("mismatches", static_cast<unsigned long long>(mismatches))
      .add("params", params)
      .done();
}

std::string utc_date() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string current_commit(const std::string& source_dir) {
  if (const char* env = std::getenv("WARPSTORE_COMMIT"); env && *env) return env;
  const std::string cmd = "git -C '" + source_dir + "' rev-parse HEAD 2>/dev/null";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[128];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    const int status = ::pclose(p);
    if (status != 0) out.clear();
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (out.size() != 40 || out.find_first_not_of("0123456789abcdef") != std::string::npos)
    return "unknown";
  return out;
}

std::string study_of(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

#ifndef WARPSTORE_SOURCE_DIR
#define WARPSTORE_SOURCE_DIR "."
#endif

run_info run_info::now(std::string study, std::string device, const std::string& command_line) {
  run_info r;
  r.study = std::move(study);
  r.device = std::move(device);
  r.date = utc_date();
  r.commit = current_commit(WARPSTORE_SOURCE_DIR);
  const char* env = std::getenv("WARPSTORE_BENCH_COMMAND");
  r.command = env && *env ? env : command_line;
  return r;
}

namespace {

std::string merged_command(const json::value& existing, const std::string& command) {
  const json::value* old = existing.find("command");
  if (!old || !old->is_string() || old->as_string().empty()) return command;
  const std::string& prev = old->as_string();
  const std::string sep = " && ";
  std::size_t start = 0;
  while (start <= prev.size()) {
    std::size_t end = prev.find(sep, start);
    if (end == std::string::npos) end = prev.size();
    if (prev.compare(start, end - start, command) == 0) return prev;
    start = end + sep.size();
  }
  return prev + sep + command;
}

}  // namespace

json::value merge_results(const json::value& existing, const run_info& run,
                          const std::vector<result>& results) {
  if (!existing.is_null() && !existing.is_object())
    throw std::runtime_error("results file is not a JSON object");
  json::array merged;
  if (const json::value* old = existing.find("results")) {
    if (!old->is_array()) throw std::runtime_error("results file: \"results\" is not an array");
    merged = old->as_array();
  }
  // Entries of earlier runs this run replaces: once it replaces all of
  // them, no earlier command contributed to the file any more.
  std::size_t earlier = merged.size(), replaced_earlier = 0;
  for (const result& r : results) {
    json::value entry = r.to_json();
    bool replaced = false;
    for (std::size_t i = 0; i < merged.size(); ++i) {
      const json::value* name = merged[i].find("name");
      if (name && name->is_string() && name->as_string() == r.name) {
        merged[i] = entry;
        replaced = true;
        if (i < earlier) ++replaced_earlier;
        break;
      }
    }
    if (!replaced) merged.push_back(std::move(entry));
  }
  const bool kept_earlier = replaced_earlier < earlier;
  return json::object_builder()
      .add("study", run.study)
      .add("device", run.device)
      .add("date", run.date)
      .add("commit", run.commit)
      .add("command", kept_earlier ? merged_command(existing, run.command) : run.command)
      .add("results", std::move(merged))
      .done();
}

json::value write_results(const std::string& path, const run_info& run,
                          const std::vector<result>& results) {
  namespace fs = std::filesystem;
  json::value existing;
  if (fs::exists(path)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::stringstream text;
    text << in.rdbuf();
    try {
      if (text.str().find_first_not_of(" \t\r\n") != std::string::npos)
        existing = json::value::parse(text.str());
    } catch (const json::parse_error& e) {
      throw std::runtime_error(path + " is not valid JSON (" + e.what() +
                               "); move it away or fix it, it was left as it is");
    }
  }
  json::value doc = merge_results(existing, run, results);
  const fs::path target(path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + tmp);
    out << doc.dump(2, 100) << '\n';
    out.flush();
    if (!out) throw std::runtime_error("writing " + tmp + " failed");
  }
  fs::rename(tmp, target);
  return doc;
}

std::string human_number(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  const double a = std::fabs(v);
  if (a >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3g G", v / 1e9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3g M", v / 1e6);
  else if (a >= 1e4)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 100)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else if (a >= 10)
    std::snprintf(buf, sizeof buf, "%.2f", v);
  else
    std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

std::string results_table(const std::vector<result>& results) {
  table t({"name", "value", "unit", "ceiling", "ratio", "verified", "mismatches", "ceiling name"});
  for (const auto& r : results) {
    const auto ratio = r.ratio();
    t.add({r.name, human_number(r.value), r.unit, r.ceiling ? human_number(*r.ceiling) : "-",
           ratio ? human_number(*ratio) : "-", r.verified ? "yes" : "NO",
           std::to_string(r.mismatches), r.ceiling ? r.ceiling_name : ""});
  }
  return t.str();
}

}  // namespace warpstore::bench
