// kernels/cuda/mid_m_linear.cu compiled as host C++ against the host execution layer
// (tests/gpu_host).
#include "kernels/cuda/mid_m_linear.cu"
