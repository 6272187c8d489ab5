// The GPU build of log_io.cpp, compiled by nvcc so run_warps launches a kernel.
#include "log_io.cpp"
