// MappedFile: a whole file mapped read-only into memory (POSIX mmap), unmapped on destruction; or
// bytes already in memory that stand in for a file (FromBytes: tests, data from elsewhere).
//
// Model files can be gigabytes; mapping them costs no copy and lets the OS page in only what is
// read. Move-only; the bytes stay valid while the MappedFile lives. Reading from many threads is
// safe (the bytes are read-only). The file must not be truncated while it is mapped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace tinyserve {

class MappedFile {
 public:
  // Maps `path`. NotFound if it does not exist, InvalidArgument if it is not a readable regular
  // file. An empty file maps to size() == 0.
  static StatusOr<MappedFile> Open(const std::string& path);
  // Owns `bytes`; `name` stands for the path in messages.
  static MappedFile FromBytes(std::string name, std::string bytes);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  void Unmap();

  std::string path_;
  std::string owned_;              // the bytes of FromBytes
  bool is_owned_ = false;          // data_ points into owned_, not into a mapping
  const uint8_t* data_ = nullptr;  // nullptr when size_ == 0
  size_t size_ = 0;
};

}  // namespace tinyserve
