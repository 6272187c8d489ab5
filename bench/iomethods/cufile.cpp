#include "bench/iomethods/cufile.h"

#include <dlfcn.h>

namespace warpstore::bench::iomethods {

namespace {

// cufile.h's types, as laid out on Linux x86-64.
struct cufile_status {  // CUfileError_t
  int err;              // CUfileOpError
  int cu_err;           // CUresult
};
struct cufile_descr {  // CUfileDescr_t
  int type;            // CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
constexpr int handle_type_opaque_fd = 1;

}  // namespace

struct cufile_library::entry_points {
  cufile_status (*driver_open)();
  cufile_status (*driver_close)();
  cufile_status (*handle_register)(void**, cufile_descr*);
  void (*handle_deregister)(void*);
  cufile_status (*buf_register)(const void*, std::size_t, int);
  cufile_status (*buf_deregister)(const void*);
  ssize_t (*read)(void*, void*, std::size_t, off_t, off_t);
  ssize_t (*write)(void*, const void*, std::size_t, off_t, off_t);
};

cufile_error::cufile_error(const std::string& call, int err, int cu_err)
    : std::runtime_error(call + " failed: CUfileOpError " + std::to_string(err) +
                         (cu_err != 0 ? ", CUresult " + std::to_string(cu_err) : std::string())),
      err_(err),
      cu_err_(cu_err) {}

std::unique_ptr<cufile_library> cufile_library::load(std::string& why_not) {
  std::unique_ptr<cufile_library> lib(new cufile_library());
  for (const char* name : {"libcufile.so.0", "libcufile.so"}) {
    lib->lib_ = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib->lib_) {
      lib->path_ = name;
      break;
    }
  }
  if (!lib->lib_) {
    const char* e = ::dlerror();
    why_not = std::string("dlopen libcufile.so.0: ") + (e ? e : "not found");
    return nullptr;
  }
  auto find = [&](const char* symbol) -> void* {
    void* p = ::dlsym(lib->lib_, symbol);
    if (!p && why_not.empty()) why_not = std::string(lib->path_) + " has no " + symbol;
    return p;
  };
  auto fn = std::make_unique<entry_points>();
  why_not.clear();
  fn->driver_open = reinterpret_cast<decltype(fn->driver_open)>(find("cuFileDriverOpen"));
  void* close_v2 =
      ::dlsym(lib->lib_, "cuFileDriverClose_v2");  // what cufile.h's cuFileDriverClose names
  fn->driver_close =
      reinterpret_cast<decltype(fn->driver_close)>(close_v2 ? close_v2 : find("cuFileDriverClose"));
  fn->handle_register =
      reinterpret_cast<decltype(fn->handle_register)>(find("cuFileHandleRegister"));
  fn->handle_deregister =
      reinterpret_cast<decltype(fn->handle_deregister)>(find("cuFileHandleDeregister"));
  fn->buf_register = reinterpret_cast<decltype(fn->buf_register)>(find("cuFileBufRegister"));
  fn->buf_deregister = reinterpret_cast<decltype(fn->buf_deregister)>(find("cuFileBufDeregister"));
  fn->read = reinterpret_cast<decltype(fn->read)>(find("cuFileRead"));
  fn->write = reinterpret_cast<decltype(fn->write)>(find("cuFileWrite"));
  if (!why_not.empty()) return nullptr;  // the destructor closes the library
  lib->fn_ = std::move(fn);
  return lib;
}

cufile_library::~cufile_library() {
  if (open_) driver_close();
  if (lib_) ::dlclose(lib_);
}

void cufile_library::driver_open() {
  const cufile_status s = fn_->driver_open();
  if (s.err != 0) throw cufile_error("cuFileDriverOpen", s.err, s.cu_err);
  open_ = true;
}

void cufile_library::driver_close() {
  if (!open_) return;
  open_ = false;
  fn_->driver_close();  // at teardown: nothing to do about a failure
}

cufile_library::handle cufile_library::register_file(int fd) {
  cufile_descr d{};
  d.type = handle_type_opaque_fd;
  d.handle.fd = fd;
  void* h = nullptr;
  const cufile_status s = fn_->handle_register(&h, &d);
  if (s.err != 0) throw cufile_error("cuFileHandleRegister", s.err, s.cu_err);
  return h;
}

void cufile_library::deregister_file(handle h) {
  fn_->handle_deregister(h);
}

void cufile_library::register_buffer(void* device_ptr, std::size_t bytes) {
  const cufile_status s = fn_->buf_register(device_ptr, bytes, 0);
  if (s.err != 0) throw cufile_error("cuFileBufRegister", s.err, s.cu_err);
}

void cufile_library::deregister_buffer(void* device_ptr) {
  fn_->buf_deregister(device_ptr);
}

ssize_t cufile_library::read(handle h, void* device_base, std::size_t bytes, off_t file_offset,
                             off_t device_offset) {
  return fn_->read(h, device_base, bytes, file_offset, device_offset);
}

ssize_t cufile_library::write(handle h, const void* device_base, std::size_t bytes,
                              off_t file_offset, off_t device_offset) {
  return fn_->write(h, device_base, bytes, file_offset, device_offset);
}

}  // namespace warpstore::bench::iomethods
