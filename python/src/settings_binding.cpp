// The settings of the extension, shared by both targets' modules: the
// table of settings (warpstore/settings_table.h) and their values with the
// WARPSTORE_* variables applied, for warpstore.settings; make_options, the
// options an Array opens with; parse_size; validate_settings.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "binding.h"
#include "warpstore/error.h"
#include "warpstore/settings.h"
#include "warpstore/settings_table.h"

namespace nb = nanobind;

namespace warpstore::python {

options make_options(std::uint64_t cache_bytes, std::uint32_t line_size,
                     const std::string& controller, std::uint32_t threads,
                     std::uint64_t timeout_ms, const std::string& direct) {
  options o = options::from_environment();
  // Python opens are read-only (mode="r"), whatever WARPSTORE_WRITABLE says
  // (a writable open takes the file's write lock: a second open failed).
  o.writable = false;
  o.cache_bytes = cache_bytes;
  o.line_size = line_size;
  o.controller = parse_controller(controller);
  o.direct = parse_direct(direct);
  o.service_threads = threads;
  if (timeout_ms == 0 || timeout_ms > ~std::uint64_t{0} / 1'000'000ull)
    throw warpstore::invalid_argument("deadline of " + std::to_string(timeout_ms) +
                                      " ms is out of range: it must be from 1 ms to " +
                                      std::to_string(~std::uint64_t{0} / 1'000'000ull) + " ms");
  o.timeout_ns = timeout_ms * 1'000'000ull;
  o.validate();
  return o;
}

namespace {

// Every setting by its field name (include/warpstore/settings.h), with the
// WARPSTORE_* variables applied, in the variable's unit (words for choices).
nb::dict environment_settings() {
  const options o = options::from_environment();
  nb::dict d;
  for (const setting& s : settings_table()) {
    if (s.type == setting_type::choice)
      d[s.name] = std::string(s.get_word(o));
    else
      d[s.name] = s.get(o);
  }
  return d;
}

// The settings table for Python: one dict a setting.
nb::list python_settings_table() {
  static const char* const types[] = {"size", "count", "milliseconds", "flag", "choice"};
  const options defaults;
  nb::list out;
  for (const setting& s : settings_table()) {
    nb::dict d;
    d["name"] = s.name;
    d["env"] = s.variable;
    d["python"] = s.python;
    d["flag"] = s.flag;
    d["type"] = types[static_cast<int>(s.type)];
    d["group"] = s.group == setting_group::tuning ? "tuning" : "core";
    if (s.type == setting_type::choice) {
      d["default"] = std::string(s.get_word(defaults));
      d["choices"] = nb::cast(std::string(s.choices)).attr("split")("|");
    } else {
      d["default"] = s.get(defaults);
      d["min"] = s.min;
      d["max"] = s.max;
      d["power_of_two"] = s.power_of_two;
    }
    d["range"] = s.range();
    d["doc"] = s.doc;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_settings(nb::module_& m) {
  m.def("parse_size", [](const std::string& s) { return static_cast<std::uint64_t>(parse_size(s)); });
  m.def("environment_settings", &environment_settings,
        "Defaults (include/warpstore/settings.h) with WARPSTORE_* variables applied");
  m.def("settings_table", &python_settings_table,
        "Every setting: name, env, python, flag, type, group, default, min/max or choices, doc");
  m.def("validate_settings",
        [](std::uint64_t cache, std::uint32_t line, const std::string& ctl, std::uint32_t thr,
           std::uint64_t timeout_ms, const std::string& direct) {
          make_options(cache, line, ctl, thr, timeout_ms, direct);
        });
}

}  // namespace warpstore::python
