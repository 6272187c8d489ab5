// The GPU build of load.cpp, compiled by nvcc so run_warps launches kernels.
#include "load.cpp"
