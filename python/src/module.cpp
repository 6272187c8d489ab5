// The nanobind extension's module, built twice. _warpstore_cpu links the
// CPU target (std::thread lanes, host memory); _warpstore_cuda the GPU one.
// NB_MODULE below calls the bindings binding.h lists, one source each:
// errors_binding.cpp, settings_binding.cpp, load_binding.cpp,
// array_binding.cpp; it defines the few target functions itself (and the
// GPU build's uva_gather). Tensors arrive by DLPack; the Python layer
// (warpstore/_array.py) allocates outputs with the index tensor's own
// library, so nothing here knows PyTorch.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>

#include "binding.h"
#include "gather.h"
#include "warpstore/error.h"
#include "warpstore/runtime.h"

namespace nb = nanobind;
using namespace warpstore;

#ifndef WARPSTORE_PY_MODULE
#error "WARPSTORE_PY_MODULE names the module (_warpstore_cpu or _warpstore_cuda)"
#endif

NB_MODULE(WARPSTORE_PY_MODULE, m) {
  m.doc() = "warpstore extension (use the warpstore package, not this module)";
  python::bind_errors(m);

  m.def("available", &python::target_available,
        "True when this target can run here (a GPU is visible, or the CPU target)");
  m.def("gpu_build", &runtime::gpu_build);
  // A forked child keeps the parent's arrays alive forever (their threads
  // are not in the child, so they must never be freed there): no warnings.
  m.def("quiet_leaks", [] { nb::set_leak_warnings(false); });
  m.def("device_name", &runtime::device_name);
  python::bind_settings(m);
  python::bind_load(m);
  python::bind_array(m);

#if WARPSTORE_PY_GPU
  m.def(
      "uva_gather",
      [](nb::ndarray<nb::c_contig> src, nb::ndarray<std::int64_t, nb::ndim<1>, nb::c_contig> idx,
         nb::ndarray<nb::c_contig> out, std::uint64_t row_bytes, std::uintptr_t stream) {
        if (!python::on_host(src) || idx.device_type() != nb::device::cuda::value ||
            out.device_type() != nb::device::cuda::value)
          throw warpstore::invalid_argument(
              "uva_gather: pinned host source, CUDA indices and output");
        if (out.nbytes() != idx.shape(0) * row_bytes)
          throw warpstore::invalid_argument("uva_gather: output size does not match");
        nb::gil_scoped_release release;
        python::uva_gather(src.data(), row_bytes, idx.data(), idx.shape(0), out.data(), stream);
      },
      nb::arg("src"), nb::arg("idx"), nb::arg("out"), nb::arg("row_bytes"), nb::arg("stream") = 0,
      "Benchmark ceiling: rows of pinned host memory gathered by the GPU over UVA (no bounds "
      "check: the caller's indices must be valid)");
#endif
}
