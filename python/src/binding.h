// What the extension's binding sources share: the poll that lets Ctrl-C stop
// a long call, and the bindings defined outside module.cpp.
#pragma once

#include <nanobind/nanobind.h>

#include <optional>

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

// load_file (load_binding.cpp).
void bind_load(nanobind::module_& m);

}  // namespace warpstore::python
