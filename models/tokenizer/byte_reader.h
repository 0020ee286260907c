// ByteReader: a bounds-checked little-endian cursor over a byte buffer it does not own.
//
// Every Read* returns false, and leaves the cursor where it was, when the buffer has fewer bytes
// left than the value needs; nothing is ever read past the end. The buffer must outlive the reader.
// Not thread-safe (it has a cursor); cheap to create.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace tinyserve {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return size_ - offset_; }

  // Reads a trivially copyable little-endian value (the host is little-endian).
  template <typename T>
  bool Read(T* value) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) return false;
    std::memcpy(value, data_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return true;
  }

  // Reads `length` raw bytes into `out`; a length past the end returns false before anything is
  // allocated.
  bool ReadBytes(uint64_t length, std::string* out) {
    if (length > remaining()) return false;
    out->assign(reinterpret_cast<const char*>(data_ + offset_), static_cast<size_t>(length));
    offset_ += static_cast<size_t>(length);
    return true;
  }

  // Moves the cursor forward by `length` bytes. Returns false (and does not move) past the end.
  bool Skip(uint64_t length) {
    if (length > remaining()) return false;
    offset_ += static_cast<size_t>(length);
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};

static_assert(std::endian::native == std::endian::little, "tinyserve reads little-endian files");

}  // namespace tinyserve
