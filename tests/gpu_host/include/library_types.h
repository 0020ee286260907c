// Host execution layer (tests/gpu_host): the data type tags cuBLAS takes.
#pragma once

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
};
using cudaDataType = cudaDataType_t;
