#include "models/tokenizer/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace tinyserve {

StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound(path + ": no such file");
    return InvalidArgument(path + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return InvalidArgument(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return MappedFile(path, nullptr, 0);
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (addr == MAP_FAILED) return InvalidArgument(path + ": cannot mmap: " + std::strerror(err));
  return MappedFile(path, static_cast<const uint8_t*>(addr), size);
}

MappedFile MappedFile::FromBytes(std::string name, std::string bytes) {
  MappedFile file(std::move(name), nullptr, 0);
  file.owned_ = std::move(bytes);
  file.is_owned_ = true;
  file.size_ = file.owned_.size();
  file.data_ = file.size_ == 0 ? nullptr : reinterpret_cast<const uint8_t*>(file.owned_.data());
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    is_owned_ = std::exchange(other.is_owned_, false);
    owned_ = std::move(other.owned_);
    size_ = std::exchange(other.size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    // A moved std::string may move its bytes (small-string buffer): point at the new home.
    if (is_owned_ && size_ != 0) data_ = reinterpret_cast<const uint8_t*>(owned_.data());
  }
  return *this;
}

MappedFile::~MappedFile() { Unmap(); }

void MappedFile::Unmap() {
  if (data_ != nullptr && !is_owned_) ::munmap(const_cast<uint8_t*>(data_), size_);
  owned_.clear();
  is_owned_ = false;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace tinyserve
