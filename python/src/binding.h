// What the extension's binding sources share: the poll that lets Ctrl-C stop
// a long call, the options an open takes, and the bindings module.cpp's
// NB_MODULE calls, one source each.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <string>

#include "warpstore/settings.h"

namespace warpstore::python {

// The poll a gather calls while it waits: takes the GIL for a moment and
// runs Python's signal handlers (main thread only). A handler that raised
// (Ctrl-C: KeyboardInterrupt) cancels the gather; its exception is kept and
// raised once the gather has stopped.
struct signal_poll {
  std::optional<nanobind::python_error> raised;
  bool operator()() {
    nanobind::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return false;
    raised.emplace();  // fetches and clears the error indicator
    return true;
  }
};

// Whether a tensor is in host memory (pageable or pinned).
template <class Array>
bool on_host(const Array& a) {
  return a.device_type() == nanobind::device::cpu::value ||
         a.device_type() == nanobind::device::cuda_host::value;
}

// The options of an Array (and of validate_settings): the WARPSTORE_*
// variables, then these arguments over them, validated
// (settings_binding.cpp).
options make_options(std::uint64_t cache_bytes, std::uint32_t line_size,
                     const std::string& controller, std::uint32_t threads,
                     std::uint64_t timeout_ms, const std::string& direct);

// The exception translator: warpstore errors as Python ones (errors_binding.cpp).
void bind_errors(nanobind::module_& m);
// parse_size, environment_settings, settings_table, validate_settings
// (settings_binding.cpp).
void bind_settings(nanobind::module_& m);
// load_file (load_binding.cpp).
void bind_load(nanobind::module_& m);
// Array, Cache, PendingGather (array_binding.cpp).
void bind_array(nanobind::module_& m);

}  // namespace warpstore::python
