// The error mapping of the extension, shared by both targets' modules: the
// one place C++ errors become Python ones (set_python_error, registered as
// nanobind's exception translator). The Python classes' attributes are
// listed in warpstore/_errors.py.
#include <nanobind/nanobind.h>

#include <cerrno>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "binding.h"
#include "warpstore/error.h"

namespace nb = nanobind;

namespace warpstore::python {

namespace {

// A message as Python text: paths in it may not be UTF-8 (they are bytes
// on Linux), so undecodable bytes show as \xNN instead of failing.
PyObject* decoded(const std::string& s) {
  return PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace");
}

// A path as Python text, decoded as os.fsdecode would, so it equals the str
// given to open(); None for no path.
PyObject* fs_path(const std::string& path) {
  if (path.empty()) Py_RETURN_NONE;
  return PyUnicode_DecodeFSDefaultAndSize(path.data(), static_cast<Py_ssize_t>(path.size()));
}

PyObject* optional_int(const std::optional<std::uint64_t>& v) {
  if (!v) Py_RETURN_NONE;
  return PyLong_FromUnsignedLongLong(*v);
}

// The Python exception for a warpstore error, chosen from its kind:
// index_out_of_range: IndexError; io, deadline: OSError(EIO, message, path);
// file: OSError(errno, message, path), so Python picks the subclass
// (PermissionError for EACCES, FileNotFoundError for ENOENT, ...);
// invalid_argument: ValueError; anything else RuntimeError. Every one
// carries the error's fields as attributes (warpstore/_errors.py lists
// them): kind (a string), path, index, lba, offset, status (the raw NVMe
// status), count; None where a field is not known, and row and position
// None (the Python layer knows them).
void set_python_error(const warpstore::error& e) {
  const error_info& i = e.info();
  PyObject* type = PyExc_RuntimeError;
  PyObject* args = nullptr;
  switch (i.kind) {
    case error_kind::index_out_of_range:
      type = PyExc_IndexError;
      break;
    case error_kind::io:
    case error_kind::deadline:
    case error_kind::file:
      type = PyExc_OSError;
      args =
          Py_BuildValue("(iNN)", i.kind == error_kind::file && i.sys_errno != 0 ? i.sys_errno : EIO,
                        decoded(e.what()), fs_path(i.path));
      break;
    case error_kind::invalid_argument:
      type = PyExc_ValueError;
      break;
    default:
      break;
  }
  if (args == nullptr) args = Py_BuildValue("(N)", decoded(e.what()));
  PyObject* exc = args ? PyObject_Call(type, args, nullptr) : nullptr;
  Py_XDECREF(args);
  if (exc == nullptr) return;  // the error raised while building it stays set
  const std::pair<const char*, PyObject*> fields[] = {
      {"kind", PyUnicode_FromString(to_string(i.kind))},
      {"path", fs_path(i.path)},
      {"index", optional_int(i.index)},
      {"lba", optional_int(i.lba)},
      {"offset", optional_int(i.offset)},
      {"status", i.status.raw != 0 ? PyLong_FromUnsignedLong(i.status.raw) : Py_NewRef(Py_None)},
      {"count", PyLong_FromUnsignedLongLong(i.count)},
      {"row", Py_NewRef(Py_None)},
      {"position", Py_NewRef(Py_None)},
  };
  bool ok = true;
  for (const auto& [name, value] : fields) {
    ok = ok && value != nullptr && PyObject_SetAttrString(exc, name, value) == 0;
    Py_XDECREF(value);
  }
  if (ok) PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
  Py_DECREF(exc);
}

}  // namespace

void bind_errors(nb::module_&) {
  // The one place C++ errors become Python ones: every warpstore error by its
  // kind and fields (set_python_error), never by its message. Out-of-range
  // indices recorded on the device (the Python layer checks them first)
  // become IndexError, failed reads and system calls OSError with the path,
  // bad arguments ValueError. nanobind keeps the translator for the
  // module's domain (NB_DOMAIN), not on m: it serves every binding source.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const warpstore::error& e) {
      set_python_error(e);
    } catch (const std::invalid_argument& e) {
      PyErr_SetObject(PyExc_ValueError, nb::steal(decoded(e.what())).ptr());
    }
  });
}

}  // namespace warpstore::python
