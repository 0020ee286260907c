// kernels/cuda/flash_prefill.cu compiled as host C++ against the host execution layer
// (tests/gpu_host).
#include "kernels/cuda/flash_prefill.cu"
