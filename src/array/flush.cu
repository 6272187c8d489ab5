// The GPU build of flush.cpp, compiled by nvcc so run_warps launches a kernel.
#include "flush.cpp"
