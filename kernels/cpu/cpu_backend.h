// The CPU backend's knobs beside CreateCpuBackend (kernels/backend.h).
#pragma once

namespace tinyserve {

// Tests and benchmarks only: the widest instruction set the CPU backend's attention may use,
// "best" (the default: AVX-512 where the CPU has it, else AVX2), "avx512", "avx2" or "portable"
// (plain loops), so that a test can check every path this CPU can run; all give the same bits.
// Returns false (and changes nothing) when this CPU cannot run it. Not thread-safe: call it while
// no attention runs.
bool SetCpuAttentionIsaForTesting(const char* isa);

}  // namespace tinyserve
