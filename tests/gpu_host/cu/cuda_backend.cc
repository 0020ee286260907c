// kernels/cuda/cuda_backend.cu compiled as host C++ against the host execution layer
// (tests/gpu_host).
#include "kernels/cuda/cuda_backend.cu"
