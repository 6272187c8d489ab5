// The binding of warpstore load (load.h), shared by both targets' modules.
#include <nanobind/stl/string.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "binding.h"
#include "load.h"

namespace nb = nanobind;

namespace warpstore::python {

void bind_load(nb::module_& m) {
  // warpstore load (load.h): the paths as bytes (os.fsencode). The GIL is
  // released while it copies; Ctrl-C stops it between chunks and raises
  // KeyboardInterrupt once it has stopped. Settings as Array's; the
  // controller "" is the environment's (WARPSTORE_CONTROLLER, else auto).
  m.def(
      "load_file",
      [](nb::bytes src_bytes, nb::bytes dst_bytes, std::uint64_t offset,
         const std::string& ctl, std::uint64_t chunk_bytes) {
        const std::string src(src_bytes.c_str(), src_bytes.size());
        const std::string dst(dst_bytes.c_str(), dst_bytes.size());
        options opts = options::from_environment();
        if (!ctl.empty()) opts.controller = parse_controller(ctl);
        signal_poll poll;
        load_result r;
        try {
          nb::gil_scoped_release release;
          r = load_file(src, dst, offset, opts, chunk_bytes, std::ref(poll));
        } catch (...) {
          if (!poll.raised) throw;
        }
        if (poll.raised) throw std::move(*poll.raised);
        nb::dict d;
        d["bytes"] = r.bytes;
        d["write_seconds"] = r.write_seconds;
        d["verify_seconds"] = r.verify_seconds;
        d["first_mismatch"] = r.first_mismatch == no_mismatch
                                  ? nb::none()
                                  : nb::object(nb::int_(r.first_mismatch));
        return d;
      },
      nb::arg("src"), nb::arg("dst"), nb::arg("offset") = 0, nb::arg("controller") = "",
      nb::arg("chunk_bytes") = load_chunk_bytes,
      "Copies file src into dst from byte offset through the write path, flushes, reads it "
      "back from the device and compares; a dict of bytes, write_seconds, verify_seconds, "
      "first_mismatch (None when all verified)");
}

}  // namespace warpstore::python
