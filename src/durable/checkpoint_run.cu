// The GPU build of checkpoint_run.cpp, compiled by nvcc so run_warps launches a kernel.
#include "checkpoint_run.cpp"
