// The nanobind extension's module, built twice. _warpstore_cpu links the
// CPU target (std::thread lanes, host memory); _warpstore_cuda the GPU one.
// NB_MODULE below calls the bindings binding.h lists, one source each:
// errors_binding.cpp, settings_binding.cpp, load_binding.cpp,
// array_binding.cpp; it defines the few target functions itself (and the
// GPU build's uva_gather and the neighbour sampler's entry points). Tensors arrive by DLPack; the Python layer
// (warpstore/_array.py) allocates outputs with the index tensor's own
// library, so nothing here knows PyTorch.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "binding.h"
#include "gather.h"
#include "warpstore/controller.h"
#include "warpstore/error.h"
#include "warpstore/runtime.h"
#if WARPSTORE_PY_GPU
#include "sample.h"
#endif

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
  m.def(
      "bulk_stats",
      [] {
        const bulk_read_stats s = bulk_read_totals();
        nb::dict d;
        d["calls"] = s.calls;
        d["bytes"] = s.bytes;
        d["chunks"] = s.chunks;
        d["caller_chunks"] = s.caller_chunks;
        d["lanes"] = s.lanes;
        d["helpers"] = s.helpers;
        d["call_ns"] = s.call_ns;
        d["read_ns"] = s.read_ns;
        d["buffer_wait_ns"] = s.buffer_wait_ns;
        d["drain_ns"] = s.drain_ns;
        d["wake_ns"] = s.wake_ns;
        return d;
      },
      "What the process's bulk reads (Array.read) did so far, for benchmarks: calls, bytes, "
      "chunks (caller_chunks read by the calling threads), lanes and helpers taken (summed "
      "over calls), and nanoseconds: call_ns (wall), read_ns (pread), buffer_wait_ns "
      "(waiting for a pinned buffer's last copy), drain_ns (waiting for the last copies), "
      "wake_ns (hand-out to a helper's first chunk), each summed over the threads");
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

  // The neighbour sampler (sample.h), for warpstore.feature_store: raw
  // addresses of the caller's CUDA tensors (int64, on the current device),
  // its stream; the sizes land in pinned `sizes` once the stream gets there.
  m.def(
      "sample_capacity",
      [](std::int64_t seeds, std::int64_t nodes, const std::vector<std::int64_t>& fanouts) {
        const python::sample_capacity c = python::sample_capacity_of(seeds, nodes, fanouts);
        return std::make_pair(c.nodes, c.edge_offset);
      },
      nb::arg("seeds"), nb::arg("nodes"), nb::arg("fanouts"),
      "(node capacity, per-hop edge offsets and their total) of one batch");
  m.def("sample_workspace_bytes", &python::sample_workspace_bytes, nb::arg("seeds"),
        nb::arg("nodes"), nb::arg("fanouts"));
  m.def(
      "sample_hops",
      [](std::uintptr_t colptr, std::uintptr_t row, std::int64_t nodes, std::int64_t edges,
         std::uintptr_t local, std::uintptr_t seed, std::int64_t seeds,
         const std::vector<std::int64_t>& fanouts, std::uint64_t key, std::uintptr_t node_out,
         std::uintptr_t edge_out, std::uintptr_t src_out, std::uintptr_t dst_out,
         std::uintptr_t workspace, std::uint64_t workspace_bytes, std::uintptr_t sizes,
         std::uintptr_t stream) {
        python::sample_job j;
        j.colptr = reinterpret_cast<const std::int64_t*>(colptr);
        j.row = reinterpret_cast<const std::int64_t*>(row);
        j.nodes = nodes;
        j.edges = edges;
        j.local = reinterpret_cast<std::int64_t*>(local);
        j.seed = reinterpret_cast<const std::int64_t*>(seed);
        j.seeds = seeds;
        j.fanouts = fanouts;
        j.key = key;
        j.node_out = reinterpret_cast<std::int64_t*>(node_out);
        j.edge_out = reinterpret_cast<std::int64_t*>(edge_out);
        j.src_out = reinterpret_cast<std::int64_t*>(src_out);
        j.dst_out = reinterpret_cast<std::int64_t*>(dst_out);
        j.workspace = reinterpret_cast<void*>(workspace);
        j.workspace_bytes = workspace_bytes;
        j.sizes = reinterpret_cast<std::int64_t*>(sizes);
        nb::gil_scoped_release release;
        python::sample_hops(j, reinterpret_cast<cudaStream_t>(stream));
      },
      nb::arg("colptr"), nb::arg("row"), nb::arg("nodes"), nb::arg("edges"), nb::arg("local"),
      nb::arg("seed"), nb::arg("seeds"), nb::arg("fanouts"), nb::arg("key"),
      nb::arg("node_out"), nb::arg("edge_out"), nb::arg("src_out"), nb::arg("dst_out"),
      nb::arg("workspace"), nb::arg("workspace_bytes"), nb::arg("sizes"), nb::arg("stream"),
      "Queues one batch's neighbour sampling on `stream` (sample.h)");
#endif
}
