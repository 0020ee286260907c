// SplitMix64: the one 64-bit mixing function of the project (Steele, Lea and Flood, "Fast
// splittable pseudorandom number generators", 2014: the finalizer of its SplitMix64 generator).
// It stirs a 64-bit value into one whose every bit depends on every input bit. The prefix-cache
// block hash and the engine's default per-request seeds are built from it, so its output is part
// of their contracts: never change the constants. Pure, constexpr, no state.
#pragma once

#include <cstdint>

namespace tinyserve {

// The SplitMix64 output for state `x` (the state is advanced by the golden-ratio increment first).
constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace tinyserve
