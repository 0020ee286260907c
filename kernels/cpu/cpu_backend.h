// The CPU backend's knobs beside CreateCpuBackend (kernels/backend.h).
#pragma once

namespace tinyserve {

// Tests and benchmarks only: vectors = false makes the CPU backend's attention run its portable
// loops, true (the default) the widest vector paths this CPU has (AVX2 dots, AVX-512 values).
// Both give the same bits. Not thread-safe: call it while no attention runs.
void SetCpuAttentionVectorsForTesting(bool vectors);

}  // namespace tinyserve
