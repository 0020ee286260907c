// kernels/cuda/paged_attention.cu compiled as host C++ against the host execution layer
// (tests/gpu_host).
#include "kernels/cuda/paged_attention.cu"
