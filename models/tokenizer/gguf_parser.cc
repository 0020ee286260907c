// GgufFile::Parser: reads a GGUF file front to back, checking every length and count first.
#include "models/tokenizer/gguf.h"

#include <limits>
#include <unordered_set>
#include <utility>

#include "models/tokenizer/byte_reader.h"

namespace tinyserve {
namespace {

constexpr uint32_t kMaxDims = 4;            // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 8;         // arrays of arrays of ... deeper than this are rejected
constexpr uint64_t kMinKeyValueBytes = 13;  // u64 key length + u32 type + 1-byte value
// u64 name length + u32 n_dims + u32 type + u64 offset
constexpr uint64_t kMinTensorInfoBytes = 24;

bool IsValidType(uint32_t type) { return type <= static_cast<uint32_t>(GgufType::kFloat64); }

// Bytes one element of `type` takes at least in the file.
uint64_t MinElementBytes(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString:  // u64 length
      return 8;
    case GgufType::kArray:  // u32 type + u64 count
      return 12;
  }
  return 1;
}

}  // namespace

// Reads the file front to back; every failure is an InvalidArgument naming path and offset.
class GgufFile::Parser {
 public:
  explicit Parser(GgufFile* gguf) : gguf_(gguf), reader_(gguf->file_.data(), gguf->file_.size()) {}

  Status Parse() {
    TS_RETURN_IF_ERROR(ParseHeader());
    for (uint64_t i = 0; i < n_kv_; ++i) TS_RETURN_IF_ERROR(ParseKeyValue(i));
    TS_RETURN_IF_ERROR(ParseAlignment());
    std::unordered_set<std::string> names;
    for (uint64_t i = 0; i < n_tensors_; ++i) TS_RETURN_IF_ERROR(ParseTensorInfo(i, names));
    return PlaceTensorData();
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument(gguf_->path() + ": bad GGUF file at offset " +
                           std::to_string(reader_.offset()) + ": " + what);
  }
  Status Truncated(const std::string& what) const {
    return Error("truncated: " + what + " runs past the end of the " +
                 std::to_string(gguf_->file_.size()) + "-byte file");
  }

  Status ParseHeader() {
    const MappedFile& file = gguf_->file_;
    if (file.size() < 4 ||
        std::string_view(reinterpret_cast<const char*>(file.data()), 4) != "GGUF") {
      return InvalidArgument(file.path() + ": not a GGUF file (it does not start with \"GGUF\")");
    }
    reader_.Skip(4);
    uint32_t version = 0;
    if (!reader_.Read(&version)) return Truncated("the version");
    if (version == 1) {
      return Error("GGUF version 1 is not supported (only versions 2 and 3)");
    }
    if (version != 2 && version != 3) {
      return Error("unsupported GGUF version " + std::to_string(version) +
                   " (only 2 and 3; a huge number suggests a big-endian file)");
    }
    gguf_->version_ = version;
    if (!reader_.Read(&n_tensors_) || !reader_.Read(&n_kv_)) return Truncated("the header");
    if (n_kv_ > reader_.remaining() / kMinKeyValueBytes) {
      return Error("n_kv " + std::to_string(n_kv_) + " is impossible: only " +
                   std::to_string(reader_.remaining()) + " bytes follow the header");
    }
    if (n_tensors_ > reader_.remaining() / kMinTensorInfoBytes) {
      return Error("n_tensors " + std::to_string(n_tensors_) + " is impossible: only " +
                   std::to_string(reader_.remaining()) + " bytes follow the header");
    }
    return Status::Ok();
  }

  Status ReadString(const std::string& what, std::string* out) {
    uint64_t length = 0;
    if (!reader_.Read(&length)) return Truncated("the length of " + what);
    if (length > reader_.remaining()) {
      return Error(what + " has length " + std::to_string(length) + " but only " +
                   std::to_string(reader_.remaining()) + " bytes are left");
    }
    reader_.ReadBytes(length, out);
    return Status::Ok();
  }

  Status ReadType(const std::string& what, GgufType* type) {
    uint32_t raw = 0;
    if (!reader_.Read(&raw)) return Truncated("the type of " + what);
    if (!IsValidType(raw)) return Error(what + " has invalid type " + std::to_string(raw));
    *type = static_cast<GgufType>(raw);
    return Status::Ok();
  }

  Status ParseKeyValue(uint64_t index) {
    std::string key;
    TS_RETURN_IF_ERROR(ReadString("key #" + std::to_string(index), &key));
    const std::string what = "key '" + key + "'";
    if (gguf_->values_.count(key) != 0) return Error("duplicate " + what);
    GgufValue value;
    TS_RETURN_IF_ERROR(ReadType(what, &value.type));
    TS_RETURN_IF_ERROR(ReadValue(what, value.type, &value, 0));
    gguf_->keys_.push_back(key);
    gguf_->values_.emplace(std::move(key), std::move(value));
    return Status::Ok();
  }

  template <typename T>
  Status ReadScalar(const std::string& what, T* out) {
    if (!reader_.Read(out)) return Truncated("the value of " + what);
    return Status::Ok();
  }

  Status ReadValue(const std::string& what, GgufType type, GgufValue* value, int depth) {
    switch (type) {
      case GgufType::kString:
        return ReadString(what, &value->string_value);
      case GgufType::kArray:
        return ReadArray(what, &value->array_value, depth + 1);
      case GgufType::kFloat32:
      case GgufType::kFloat64:
        return ReadFloatElement(what, type, &value->float_value);
      case GgufType::kInt8:
      case GgufType::kInt16:
      case GgufType::kInt32:
      case GgufType::kInt64:
        return ReadIntElement(what, type, &value->int_value);
      default:
        return ReadUintElement(what, type, &value->uint_value);
    }
  }

  Status ReadUintElement(const std::string& what, GgufType type, uint64_t* out) {
    switch (type) {
      case GgufType::kUint8: {
        uint8_t v = 0;
        TS_RETURN_IF_ERROR(ReadScalar(what, &v));
        *out = v;
        return Status::Ok();
      }
      case GgufType::kBool: {
        uint8_t v = 0;
        TS_RETURN_IF_ERROR(ReadScalar(what, &v));
        if (v > 1) return Error(what + " is a bool with byte value " + std::to_string(v));
        *out = v;
        return Status::Ok();
      }
      case GgufType::kUint16: {
        uint16_t v = 0;
        TS_RETURN_IF_ERROR(ReadScalar(what, &v));
        *out = v;
        return Status::Ok();
      }
      case GgufType::kUint32: {
        uint32_t v = 0;
        TS_RETURN_IF_ERROR(ReadScalar(what, &v));
        *out = v;
        return Status::Ok();
      }
      default:
        return ReadScalar(what, out);  // kUint64
    }
  }

  Status ReadIntElement(const std::string& what, GgufType type, int64_t* out) {
    switch (type) {
      case GgufType::kInt8: {
        int8_t v = 0;
        TS_RETURN_IF_ERROR(ReadScalar(what, &v));
        *out = v;
        return Status::Ok();
      }
      case GgufType::kInt16: {
        int16_t v = 0;
        TS_RETURN_IF_ERROR(ReadScalar(what, &v));
        *out = v;
        return Status::Ok();
      }
      case GgufType::kInt32: {
        int32_t v = 0;
        TS_RETURN_IF_ERROR(ReadScalar(what, &v));
        *out = v;
        return Status::Ok();
      }
      default:
        return ReadScalar(what, out);  // kInt64
    }
  }

  Status ReadFloatElement(const std::string& what, GgufType type, double* out) {
    if (type == GgufType::kFloat32) {
      float v = 0;
      TS_RETURN_IF_ERROR(ReadScalar(what, &v));
      *out = v;
      return Status::Ok();
    }
    return ReadScalar(what, out);
  }

  Status ReadArray(const std::string& what, GgufArray* array, int depth) {
    if (depth > kMaxArrayNesting) {
      return Error(what + " nests arrays more than " + std::to_string(kMaxArrayNesting) + " deep");
    }
    TS_RETURN_IF_ERROR(ReadType("the elements of " + what, &array->element_type));
    uint64_t count = 0;
    if (!reader_.Read(&count)) return Truncated("the element count of " + what);
    const GgufType type = array->element_type;
    if (count > reader_.remaining() / MinElementBytes(type)) {
      return Error(what + " claims " + std::to_string(count) + " elements of type " +
                   GgufTypeName(type) + " but only " + std::to_string(reader_.remaining()) +
                   " bytes are left");
    }
    const size_t n = static_cast<size_t>(count);
    for (size_t i = 0; i < n; ++i) {
      const std::string& element = what;  // messages name the array; the offset locates the element
      switch (type) {
        case GgufType::kString:
          array->strings.emplace_back();
          TS_RETURN_IF_ERROR(ReadString("an element of " + element, &array->strings.back()));
          break;
        case GgufType::kArray:
          array->arrays.emplace_back();
          TS_RETURN_IF_ERROR(ReadArray(element, &array->arrays.back(), depth + 1));
          break;
        case GgufType::kFloat32:
        case GgufType::kFloat64:
          if (i == 0) array->floats.reserve(n);
          array->floats.emplace_back();
          TS_RETURN_IF_ERROR(ReadFloatElement(element, type, &array->floats.back()));
          break;
        case GgufType::kInt8:
        case GgufType::kInt16:
        case GgufType::kInt32:
        case GgufType::kInt64:
          if (i == 0) array->ints.reserve(n);
          array->ints.emplace_back();
          TS_RETURN_IF_ERROR(ReadIntElement(element, type, &array->ints.back()));
          break;
        default:
          if (i == 0) array->uints.reserve(n);
          array->uints.emplace_back();
          TS_RETURN_IF_ERROR(ReadUintElement(element, type, &array->uints.back()));
          break;
      }
    }
    return Status::Ok();
  }

  Status ParseAlignment() {
    const GgufValue* value = gguf_->Find("general.alignment");
    if (value == nullptr) return Status::Ok();
    StatusOr<uint64_t> alignment = gguf_->GetUint("general.alignment");
    if (!alignment.ok()) return alignment.status();
    const uint64_t a = *alignment;
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30)) {
      return InvalidArgument(gguf_->path() + ": general.alignment " + std::to_string(a) +
                             " is not a power of two (up to 2^30)");
    }
    gguf_->alignment_ = a;
    return Status::Ok();
  }

  Status ParseTensorInfo(uint64_t index, std::unordered_set<std::string>& names) {
    GgufTensorInfo tensor;
    TS_RETURN_IF_ERROR(ReadString("the name of tensor #" + std::to_string(index), &tensor.name));
    const std::string what = "tensor '" + tensor.name + "'";
    if (!names.insert(tensor.name).second) return Error("duplicate " + what);
    uint32_t n_dims = 0;
    if (!reader_.Read(&n_dims)) return Truncated("the n_dims of " + what);
    if (n_dims > kMaxDims) {
      return Error(what + " has " + std::to_string(n_dims) + " dims (at most " +
                   std::to_string(kMaxDims) + ")");
    }
    tensor.num_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      if (!reader_.Read(&dim)) return Truncated("the dims of " + what);
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && tensor.num_elements > std::numeric_limits<int64_t>::max() / dim)) {
        return Error(what + " has an element count that overflows int64");
      }
      tensor.dims.push_back(dim);
      tensor.num_elements *= dim;
    }
    if (!reader_.Read(&tensor.ggml_type) || !reader_.Read(&tensor.offset)) {
      return Truncated("the type and offset of " + what);
    }
    const GgmlTypeTraits* type = FindGgmlType(tensor.ggml_type);
    if (type == nullptr) {
      return Error(what + " has unknown ggml type " + std::to_string(tensor.ggml_type));
    }
    const GgmlTypeTraits& traits = *type;
    if (traits.block_elements != 0) {
      if (!tensor.dims.empty() && tensor.dims[0] % traits.block_elements != 0) {
        return Error(what + " of type " + traits.name + " has dims[0] " +
                     std::to_string(tensor.dims[0]) + ", not a multiple of its block size " +
                     std::to_string(traits.block_elements));
      }
      // num_elements < 2^63 and block_bytes / block_elements <= 4, so this cannot overflow.
      const uint64_t blocks = tensor.num_elements / traits.block_elements;
      if (blocks > std::numeric_limits<uint64_t>::max() / traits.block_bytes) {
        return Error(what + " is too large");
      }
      tensor.num_bytes = blocks * traits.block_bytes;
    }
    if (tensor.offset % gguf_->alignment_ != 0) {
      return Error(what + " has offset " + std::to_string(tensor.offset) +
                   ", not a multiple of the alignment " + std::to_string(gguf_->alignment_));
    }
    gguf_->tensors_.push_back(std::move(tensor));
    return Status::Ok();
  }

  Status PlaceTensorData() {
    const uint64_t end_of_infos = reader_.offset();
    const uint64_t a = gguf_->alignment_;
    gguf_->data_offset_ = (end_of_infos + a - 1) / a * a;
    const uint64_t file_size = gguf_->file_.size();
    for (const GgufTensorInfo& tensor : gguf_->tensors_) {
      const uint64_t data_size =
          file_size > gguf_->data_offset_ ? file_size - gguf_->data_offset_ : 0;
      if (tensor.offset > data_size || tensor.num_bytes > data_size - tensor.offset) {
        return InvalidArgument(gguf_->path() + ": bad GGUF file: tensor '" + tensor.name + "' (" +
                               std::to_string(tensor.num_bytes) + " bytes at data offset " +
                               std::to_string(tensor.offset) + ") runs past the end of the " +
                               std::to_string(file_size) + "-byte file (data starts at " +
                               std::to_string(gguf_->data_offset_) + ")");
      }
    }
    return Status::Ok();
  }

  GgufFile* gguf_;
  ByteReader reader_;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
};

StatusOr<GgufFile> GgufFile::Parse(MappedFile file) {
  GgufFile gguf(std::move(file));
  Status status = Parser(&gguf).Parse();
  if (!status.ok()) return status;
  return gguf;
}

}  // namespace tinyserve
