// GgufFile: a parsed GGUF (v2 or v3) file: metadata key/values, tensor infos, the data offset.
//
// The file is memory-mapped and stays mapped while the GgufFile lives, so a weight loader can read
// tensor bytes from data() + data_offset() + tensor.offset without copying. Parsing checks every
// length and count against the bytes left in the file before reading or allocating, so any input
// gives either a GgufFile or an InvalidArgument/NotFound Status naming the file, the offset and the
// problem; never a crash or an allocation larger than a small multiple of the file size.
// Move-only; immutable after Open, so const methods are safe from many threads.
//
// Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv times {string key,
// u32 type, value}; n_tensors times {string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type,
// u64 offset}; padding to general.alignment (default 32); tensor data. A string is u64 length +
// bytes; an array is u32 element type + u64 count + elements.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "models/tokenizer/ggml_type.h"
#include "models/tokenizer/mapped_file.h"

namespace tinyserve {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "u8", "i32", "f32", "string", "array"... ; "invalid" for values outside the enum.
const char* GgufTypeName(GgufType type);

// An array value. Elements live in the one vector that matches element_type.
struct GgufArray {
  GgufType element_type = GgufType::kUint8;
  std::vector<uint64_t> uints;       // kUint8, kUint16, kUint32, kUint64, kBool (0 or 1)
  std::vector<int64_t> ints;         // kInt8, kInt16, kInt32, kInt64
  std::vector<double> floats;        // kFloat32, kFloat64 (exact)
  std::vector<std::string> strings;  // kString
  std::vector<GgufArray> arrays;     // kArray (nested arrays)

  uint64_t size() const;
};

// One metadata value; the field that matches `type` holds it.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t uint_value = 0;   // unsigned types and bool
  int64_t int_value = 0;     // signed types
  double float_value = 0;    // f32, f64
  std::string string_value;  // string
  GgufArray array_value;     // array
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order: dims[0] is the innermost (contiguous) dimension
  uint32_t ggml_type = 0;      // ggml_type: 0 F32, 1 F16, 30 BF16, 8 Q8_0...
  uint64_t offset = 0;         // bytes from data_offset(); a multiple of the alignment
  uint64_t num_elements = 0;   // product of dims
  uint64_t num_bytes = 0;      // size of the data; 0 when ggml_type's block size is not known
};

class GgufFile {
 public:
  // Maps and parses `path`.
  static StatusOr<GgufFile> Open(const std::string& path);
  // Parses a file already in memory (MappedFile::Open or MappedFile::FromBytes).
  static StatusOr<GgufFile> Parse(MappedFile file);

  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }

  // Keys in file order.
  const std::vector<std::string>& keys() const { return keys_; }
  // The value of `key`, or nullptr.
  const GgufValue* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters: NotFound when the key is missing, InvalidArgument when it has another type (or
  // an integer that does not fit). Integer getters accept any integer type; GetFloat also accepts
  // integers; GetBool accepts bool only.
  StatusOr<std::string> GetString(std::string_view key) const;
  StatusOr<uint64_t> GetUint(std::string_view key) const;
  StatusOr<int64_t> GetInt(std::string_view key) const;
  StatusOr<double> GetFloat(std::string_view key) const;
  StatusOr<bool> GetBool(std::string_view key) const;
  const GgufArray* FindArray(std::string_view key) const;  // nullptr if missing or not an array
  StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;   // integer elements
  StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;  // f32/f64 elements

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  uint64_t alignment() const { return alignment_; }
  // Absolute file offset of the tensor data section (aligned).
  uint64_t data_offset() const { return data_offset_; }
  // The tensor's bytes. REQUIRES: `tensor` is one of tensors() and its num_bytes is known.
  const uint8_t* tensor_data(const GgufTensorInfo& tensor) const {
    return file_.data() + data_offset_ + tensor.offset;
  }
  const MappedFile& file() const { return file_; }

 private:
  explicit GgufFile(MappedFile file) : file_(std::move(file)) {}
  class Parser;
  Status TypeError(std::string_view key, const GgufValue& value, const char* wanted) const;
  StatusOr<const GgufValue*> Get(std::string_view key) const;

  MappedFile file_;
  uint32_t version_ = 0;
  std::vector<std::string> keys_;
  std::unordered_map<std::string, GgufValue> values_;
  std::vector<GgufTensorInfo> tensors_;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
};

}  // namespace tinyserve
