// kernels/cuda/quant_gemm.cu compiled as host C++ against the host execution layer
// (tests/gpu_host).
#include "kernels/cuda/quant_gemm.cu"
