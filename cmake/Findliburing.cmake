# Finds liburing (headers and library); honours LIBURING_ROOT.
find_path(LIBURING_INCLUDE_DIR liburing.h HINTS $ENV{LIBURING_ROOT}/include ${LIBURING_ROOT}/include)
find_library(LIBURING_LIBRARY NAMES uring liburing.a
             HINTS $ENV{LIBURING_ROOT}/lib $ENV{LIBURING_ROOT}/lib/x86_64-linux-gnu ${LIBURING_ROOT}/lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(liburing REQUIRED_VARS LIBURING_LIBRARY LIBURING_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "install liburing (Debian/Ubuntu: apt-get install liburing-dev) or set LIBURING_ROOT")
if(liburing_FOUND AND NOT TARGET liburing::liburing)
  add_library(liburing::liburing UNKNOWN IMPORTED)
  set_target_properties(liburing::liburing PROPERTIES
    IMPORTED_LOCATION ${LIBURING_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${LIBURING_INCLUDE_DIR})
endif()
