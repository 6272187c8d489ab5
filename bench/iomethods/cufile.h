// cuFile (GPUDirect Storage) loaded at run time with dlopen, so warpstore
// builds and runs where libcufile is missing (the CI machine). Only the few
// entry points the I/O-methods comparison uses, declared here with the ABI
// of cufile.h (Linux x86-64).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace warpstore::bench::iomethods {

// A failed cuFile call: which call, its CUfileOpError (5000 and up; 5011 is
// a CUDA driver error, then cu_err holds the CUresult).
class cufile_error : public std::runtime_error {
 public:
  cufile_error(const std::string& call, int err, int cu_err);
  int err() const { return err_; }
  int cu_err() const { return cu_err_; }

 private:
  int err_;
  int cu_err_;
};

class cufile_library {
 public:
  // Loads libcufile.so.0 (then libcufile.so) and its entry points; nullptr
  // with `why_not` set when it is not there or lacks one.
  static std::unique_ptr<cufile_library> load(std::string& why_not);
  ~cufile_library();
  cufile_library(const cufile_library&) = delete;
  cufile_library& operator=(const cufile_library&) = delete;

  using handle = void*;
  void driver_open();            // cuFileDriverOpen; raises cufile_error
  void driver_close();           // cuFileDriverClose(_v2), if opened
  handle register_file(int fd);  // cuFileHandleRegister on an opaque fd
  void deregister_file(handle h);
  void register_buffer(void* device_ptr, std::size_t bytes);  // cuFileBufRegister
  void deregister_buffer(void* device_ptr);
  // cuFileRead: bytes read, or a negative value (-errno, or -CUfileOpError).
  ssize_t read(handle h, void* device_base, std::size_t bytes, off_t file_offset,
               off_t device_offset);
  // cuFileWrite: bytes written, or a negative value.
  ssize_t write(handle h, const void* device_base, std::size_t bytes, off_t file_offset,
                off_t device_offset);
  const std::string& path() const { return path_; }

 private:
  cufile_library() = default;
  struct entry_points;
  void* lib_ = nullptr;
  std::unique_ptr<entry_points> fn_;
  std::string path_;
  bool open_ = false;
};

}  // namespace warpstore::bench::iomethods
