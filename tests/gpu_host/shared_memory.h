// Host execution layer (tests/gpu_host): shared memory whose every access is checked, behind the
// TS_SHARED_* declarations of kernels/cuda/shared.cuh. Each element has a shadow recording, for
// the current barrier interval of the running block, which thread wrote it (not atomically),
// which read it and which updated it atomically; two threads touching it in one interval with at
// least one plain write, or a plain access beside another thread's atomic, is a race fault naming
// the kernel, block, array, element and both threads. An index outside the array, and a read (or
// atomic update) of an element no thread of the block has written yet (shared memory starts
// undefined in every block), are faults too.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tinyserve::gpu_host {

struct SharedShadow {
  uint64_t interval = 0;  // the barrier interval the fields below belong to
  int32_t writer = -1;    // a thread, -1 none, -2 several
  int32_t reader = -1;
  int32_t atomic = -1;
  uint64_t written_in = 0;  // the last block (serial number) that wrote it
};

enum class SharedAccessKind { kRead, kWrite, kAtomic };

// Checks and records one access of the running thread (executor.cc).
void SharedAccess(SharedShadow& s, SharedAccessKind kind, const char* array, size_t index);
void SharedIndexFault(const char* array, long long index, size_t count);

template <typename T>
class SharedPtr;

template <typename T>
class SharedRef {
 public:
  // `left`: the elements from this one to the end of its array.
  SharedRef(T* p, SharedShadow* s, const char* name, size_t index, size_t left = 1)
      : p_(p), s_(s), name_(name), index_(index), left_(left) {}
  operator T() const {  // NOLINT: reads as the element
    SharedAccess(*s_, SharedAccessKind::kRead, name_, index_);
    return *p_;
  }
  const SharedRef& operator=(const T& v) const {
    SharedAccess(*s_, SharedAccessKind::kWrite, name_, index_);
    *p_ = v;
    return *this;
  }
  const SharedRef& operator=(const SharedRef& o) const { return *this = static_cast<T>(o); }
  const SharedRef& operator+=(const T& v) const { return *this = static_cast<T>(*this) + v; }
  const SharedRef& operator-=(const T& v) const { return *this = static_cast<T>(*this) - v; }
  const SharedRef& operator*=(const T& v) const { return *this = static_cast<T>(*this) * v; }
  SharedPtr<T> operator&() const { return SharedPtr<T>(p_, s_, name_, index_, left_); }
  // An atomic read-modify-write (the atomics of cuda_runtime.h).
  T* AtomicTarget() const {
    SharedAccess(*s_, SharedAccessKind::kAtomic, name_, index_);
    return p_;
  }

 private:
  T* p_;
  SharedShadow* s_;
  const char* name_;
  size_t index_, left_;
};

// A pointer into a shared array: `count` elements from here to the array's end.
template <typename T>
class SharedPtr {
 public:
  SharedPtr(T* p, SharedShadow* s, const char* name, size_t index, size_t count)
      : p_(p), s_(s), name_(name), index_(index), count_(count) {}
  SharedRef<T> operator[](ptrdiff_t i) const {
    if (i < 0 || i >= static_cast<ptrdiff_t>(count_)) {
      SharedIndexFault(name_, static_cast<long long>(index_) + i, index_ + count_);
      return SharedRef<T>(&spill_, &spill_shadow_, name_, 0);
    }
    return SharedRef<T>(p_ + i, s_ + i, name_, index_ + static_cast<size_t>(i),
                        count_ - static_cast<size_t>(i));
  }
  SharedRef<T> operator*() const { return (*this)[0]; }
  SharedPtr operator+(ptrdiff_t i) const {
    return SharedPtr(p_ + i, s_ + i, name_, index_ + static_cast<size_t>(i),
                     count_ - static_cast<size_t>(i));
  }

 private:
  T* p_;
  SharedShadow* s_;
  const char* name_;
  size_t index_, count_;
  static inline thread_local T spill_{};
  static inline thread_local SharedShadow spill_shadow_;
};

template <typename T, size_t N>
class SharedArray {
 public:
  explicit SharedArray(const char* name) : name_(name) {}
  SharedArray(const SharedArray&) = delete;
  SharedArray& operator=(const SharedArray&) = delete;
  template <typename I>
  SharedRef<T> operator[](I i) {
    const long long at = static_cast<long long>(i);
    if (at < 0 || at >= static_cast<long long>(N)) {
      SharedIndexFault(name_, at, N);
      return SharedRef<T>(&spill_, &spill_shadow_, name_, 0);
    }
    return SharedRef<T>(data_ + at, shadow_ + at, name_, static_cast<size_t>(at),
                        N - static_cast<size_t>(at));
  }
  operator SharedPtr<T>() { return SharedPtr<T>(data_, shadow_, name_, 0, N); }  // NOLINT: decays

 private:
  const char* name_;
  T data_[N];
  SharedShadow shadow_[N];
  T spill_{};  // where an out-of-bounds access goes, after its fault
  SharedShadow spill_shadow_;
};

template <typename T>
class SharedVar {
 public:
  explicit SharedVar(const char* name) : name_(name) {}
  SharedVar(const SharedVar&) = delete;
  operator T() { return Ref(); }  // NOLINT: reads as the variable
  SharedVar& operator=(const T& v) {
    Ref() = v;
    return *this;
  }

 private:
  SharedRef<T> Ref() { return SharedRef<T>(&value_, &shadow_, name_, 0); }
  const char* name_;
  T value_{};
  SharedShadow shadow_;
};

// The dynamic shared memory of the running block (the launch's shared_bytes), viewed as T; one
// view per kernel (executor.cc).
void DynamicSharedMemory(void** data, SharedShadow** shadow, size_t* bytes);
template <typename T>
SharedPtr<T> DynamicShared(const char* name) {
  void* data = nullptr;
  SharedShadow* shadow = nullptr;
  size_t bytes = 0;
  DynamicSharedMemory(&data, &shadow, &bytes);
  return SharedPtr<T>(static_cast<T*>(data), shadow, name, 0, bytes / sizeof(T));
}

}  // namespace tinyserve::gpu_host
