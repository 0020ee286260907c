// LiveRequestMap<V>: per-request state of an observer, keyed by RequestRecord::key.
//
// The engine's request keys are unique and never reused, so an observer keys its state by them
// from a request's first event to its FINISHED. Open addressing with linear probing and
// backward-shift deletion in one flat array: a lookup is a hash and, usually, one probe in a dense
// key array (values sit in a parallel array, so probing touches 8 bytes per slot); no allocation
// except when the table grows (doubling, at half load). Erase a request's entry at its FINISHED
// event. Not thread-safe (engine thread only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace tinyserve {

template <typename V>
class LiveRequestMap {
 public:
  // The one key that cannot be stored (the engine's keys count up from 0).
  static constexpr uint64_t kEmpty = std::numeric_limits<uint64_t>::max();

  explicit LiveRequestMap(size_t initial_capacity = 256) {
    size_t cap = 16;
    while (cap < 2 * initial_capacity) cap *= 2;
    keys_.assign(cap, kEmpty);
    values_.resize(cap);
  }

  size_t size() const { return size_; }

  // Returns the value for `key`, or null if absent.
  V* Find(uint64_t key) {
    for (size_t i = Home(key);; i = Next(i)) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

  // Returns the value for `key`, inserting a default one if absent. REQUIRES: key != kEmpty.
  V& FindOrInsert(uint64_t key) {
    if (V* v = Find(key)) return *v;
    if (2 * (size_ + 1) > keys_.size()) Grow();
    size_t i = Home(key);
    while (keys_[i] != kEmpty) i = Next(i);
    keys_[i] = key;
    values_[i] = V{};
    ++size_;
    return values_[i];
  }

  // Removes `key` if present.
  void Erase(uint64_t key) {
    size_t i = Home(key);
    while (keys_[i] != key) {
      if (keys_[i] == kEmpty) return;
      i = Next(i);
    }
    // Backward-shift deletion: move later entries of the probe run into the hole.
    size_t hole = i;
    for (size_t j = Next(hole); keys_[j] != kEmpty; j = Next(j)) {
      const size_t home = Home(keys_[j]);
      // j stays unless its home lies cyclically outside (hole, j].
      const bool home_in_between =
          hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!home_in_between) {
        keys_[hole] = keys_[j];
        values_[hole] = std::move(values_[j]);
        hole = j;
      }
    }
    keys_[hole] = kEmpty;
    values_[hole] = V{};
    --size_;
  }

 private:
  size_t Home(uint64_t key) const {
    // Fibonacci hashing (consecutive keys land far apart).
    const uint64_t h = key * 0x9e3779b97f4a7c15ull;
    return static_cast<size_t>(h >> 32) & (keys_.size() - 1);
  }
  size_t Next(size_t i) const { return (i + 1) & (keys_.size() - 1); }

  void Grow() {
    std::vector<uint64_t> old_keys(keys_.size() * 2, kEmpty);
    std::vector<V> old_values(keys_.size() * 2);
    old_keys.swap(keys_);
    old_values.swap(values_);
    for (size_t k = 0; k < old_keys.size(); ++k) {
      if (old_keys[k] == kEmpty) continue;
      size_t i = Home(old_keys[k]);
      while (keys_[i] != kEmpty) i = Next(i);
      keys_[i] = old_keys[k];
      values_[i] = std::move(old_values[k]);
    }
  }

  std::vector<uint64_t> keys_;  // [capacity] a power of two, at most half full; kEmpty = empty
  std::vector<V> values_;       // [capacity] parallel to keys_
  size_t size_ = 0;
};

}  // namespace tinyserve
