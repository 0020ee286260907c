// Picking the compute device for --device auto|cpu|cuda.
#pragma once

#include <memory>
#include <string>

#include "engine/status.h"
#include "kernels/backend.h"

namespace tinyserve {

// Returns the backend for `device`. "auto" uses CUDA when a device works and otherwise falls back
// to the CPU, logging one line that says why; "cuda" without a usable device is an error.
StatusOr<std::unique_ptr<Backend>> SelectBackend(const std::string& device, int cpu_threads);

}  // namespace tinyserve
