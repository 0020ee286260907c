// safetensors files: reading (memory-mapped, validated) and writing.
//
// Layout: u64 little-endian N, then N bytes of JSON header {"NAME": {"dtype": "BF16", "shape":
// [..], "data_offsets": [BEGIN, END]}, ..., "__metadata__": {"k": "v"}}, then the data; offsets are
// relative to the end of the header. Open() checks the header length against the file size, every
// entry's dtype (F32, F16, BF16 only), that END - BEGIN is exactly what the shape and dtype need,
// that no tensor runs past the end of the file and that no two tensors overlap. Every error names
// the file, the tensor and the problem. A SafetensorsFile is move-only and immutable; reading from
// many threads is safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "models/tensor_dtype.h"
#include "models/tokenizer/mapped_file.h"

namespace tinyserve {

struct SafetensorsTensor {
  std::string name;
  TensorDtype dtype = TensorDtype::kF32;
  std::vector<int64_t> shape;  // outermost first (row-major)
  uint64_t data_begin = 0;     // absolute file offset of the first byte
  uint64_t num_bytes = 0;

  int64_t num_elements() const;
};

// "[576, 49152]".
std::string ShapeString(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  // Maps and validates `path`.
  static StatusOr<SafetensorsFile> Open(const std::string& path);
  // Validates a file already in memory (MappedFile::FromBytes in tests).
  static StatusOr<SafetensorsFile> Parse(MappedFile file);

  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  const std::string& path() const { return file_.path(); }
  // In header order.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t header_bytes() const { return header_bytes_; }  // N

  // Converts the tensor's elements to fp32: dst [num_elements].
  void ReadF32(const SafetensorsTensor& tensor, float* dst) const;
  // Tells the OS the tensor's mapped pages will not be read again, so they leave the resident set
  // (a real mapping only; a no-op for FromBytes files).
  void ReleasePages(const SafetensorsTensor& tensor) const;

 private:
  explicit SafetensorsFile(MappedFile file, bool is_mapping)
      : file_(std::move(file)), is_mapping_(is_mapping) {}
  Status ParseHeader();

  MappedFile file_;
  bool is_mapping_ = false;
  uint64_t header_bytes_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: its values are produced in order, in chunks: fill(begin, count, out) writes
// elements [begin, begin + count) as fp32 to out. Chunks let a multi-gigabyte file be written
// without holding it in memory.
struct SafetensorsWriteTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(int64_t begin, int64_t count, float* out)> fill;
  // Written as this dtype rather than the file's (scales stay fp32 in a bf16 checkpoint).
  std::optional<TensorDtype> dtype = std::nullopt;
};

// A tensor whose fp32 values are in memory: `data` must outlive the write.
SafetensorsWriteTensor TensorFromFloats(std::string name, std::vector<int64_t> shape,
                                        const float* data);

// Writes `tensors` as `dtype`, in the given order, with the header padded with spaces to a multiple
// of 8 bytes (as the reference implementation does) and `metadata` as "__metadata__".
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                        TensorDtype dtype, const std::map<std::string, std::string>& metadata = {});

}  // namespace tinyserve
