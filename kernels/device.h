// Device discovery: which compute devices this process can use. Compiles without nvcc.
#pragma once

#include <string>

#include "engine/status.h"

namespace tinyserve {

// True iff this binary was built with the CUDA backend sources.
bool BuiltWithCuda();

// Returns the number of usable CUDA devices (>= 1), or a non-OK status saying why none can be used
// ("built without CUDA", "cudaGetDeviceCount: no CUDA-capable device is detected (error 100)",
// ...).
StatusOr<int> ProbeCudaDevices();

// A one-line description of CUDA device `index` (name, memory, compute capability).
std::string DescribeCudaDevice(int index);

}  // namespace tinyserve
