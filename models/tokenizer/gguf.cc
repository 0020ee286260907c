#include "models/tokenizer/gguf.h"

#include <limits>
#include <utility>

namespace tinyserve {

const char* GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "u8";
    case GgufType::kInt8:
      return "i8";
    case GgufType::kUint16:
      return "u16";
    case GgufType::kInt16:
      return "i16";
    case GgufType::kUint32:
      return "u32";
    case GgufType::kInt32:
      return "i32";
    case GgufType::kFloat32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "u64";
    case GgufType::kInt64:
      return "i64";
    case GgufType::kFloat64:
      return "f64";
  }
  return "invalid";
}

uint64_t GgufArray::size() const {
  switch (element_type) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64:
    case GgufType::kBool:
      return uints.size();
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      return ints.size();
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return floats.size();
    case GgufType::kString:
      return strings.size();
    case GgufType::kArray:
      return arrays.size();
  }
  return 0;
}

StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  StatusOr<MappedFile> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  return Parse(std::move(file).value());
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = values_.find(std::string(key));
  return it == values_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  for (const GgufTensorInfo& tensor : tensors_) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

Status GgufFile::TypeError(std::string_view key, const GgufValue& value, const char* wanted) const {
  std::string type = GgufTypeName(value.type);
  if (value.type == GgufType::kArray) {
    type += std::string(" of ") + GgufTypeName(value.array_value.element_type);
  }
  return InvalidArgument(path() + ": GGUF key '" + std::string(key) + "' is " + type +
                         ", expected " + wanted);
}

StatusOr<const GgufValue*> GgufFile::Get(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) {
    return NotFound(path() + ": GGUF key '" + std::string(key) + "' is missing");
  }
  return value;
}

namespace {

bool IsUnsigned(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 ||
         t == GgufType::kUint64;
}
bool IsSigned(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}
bool IsFloat(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

}  // namespace

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  StatusOr<const GgufValue*> value = Get(key);
  if (!value.ok()) return value.status();
  if ((*value)->type != GgufType::kString) return TypeError(key, **value, "string");
  return (*value)->string_value;
}

StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  StatusOr<const GgufValue*> value = Get(key);
  if (!value.ok()) return value.status();
  const GgufValue& v = **value;
  if (IsUnsigned(v.type)) return v.uint_value;
  if (IsSigned(v.type)) {
    if (v.int_value < 0) {
      return InvalidArgument(path() + ": GGUF key '" + std::string(key) + "' is " +
                             std::to_string(v.int_value) + ", expected a non-negative integer");
    }
    return static_cast<uint64_t>(v.int_value);
  }
  return TypeError(key, v, "an integer");
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  StatusOr<const GgufValue*> value = Get(key);
  if (!value.ok()) return value.status();
  const GgufValue& v = **value;
  if (IsSigned(v.type)) return v.int_value;
  if (IsUnsigned(v.type)) {
    if (v.uint_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgument(path() + ": GGUF key '" + std::string(key) + "' is " +
                             std::to_string(v.uint_value) + ", which does not fit in int64");
    }
    return static_cast<int64_t>(v.uint_value);
  }
  return TypeError(key, v, "an integer");
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  StatusOr<const GgufValue*> value = Get(key);
  if (!value.ok()) return value.status();
  const GgufValue& v = **value;
  if (IsFloat(v.type)) return v.float_value;
  if (IsSigned(v.type)) return static_cast<double>(v.int_value);
  if (IsUnsigned(v.type)) return static_cast<double>(v.uint_value);
  return TypeError(key, v, "a number");
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  StatusOr<const GgufValue*> value = Get(key);
  if (!value.ok()) return value.status();
  if ((*value)->type != GgufType::kBool) return TypeError(key, **value, "bool");
  return (*value)->uint_value != 0;
}

const GgufArray* GgufFile::FindArray(std::string_view key) const {
  const GgufValue* value = Find(key);
  return value != nullptr && value->type == GgufType::kArray ? &value->array_value : nullptr;
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  StatusOr<const GgufValue*> value = Get(key);
  if (!value.ok()) return value.status();
  const GgufValue& v = **value;
  if (v.type != GgufType::kArray || v.array_value.element_type != GgufType::kString) {
    return TypeError(key, v, "array of string");
  }
  return v.array_value.strings;
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  StatusOr<const GgufValue*> value = Get(key);
  if (!value.ok()) return value.status();
  const GgufValue& v = **value;
  if (v.type != GgufType::kArray) return TypeError(key, v, "array of integers");
  const GgufArray& a = v.array_value;
  if (IsSigned(a.element_type)) return a.ints;
  if (IsUnsigned(a.element_type)) {
    std::vector<int64_t> out;
    out.reserve(a.uints.size());
    for (uint64_t u : a.uints) {
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidArgument(path() + ": GGUF key '" + std::string(key) + "' holds " +
                               std::to_string(u) + ", which does not fit in int64");
      }
      out.push_back(static_cast<int64_t>(u));
    }
    return out;
  }
  return TypeError(key, v, "array of integers");
}

StatusOr<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  StatusOr<const GgufValue*> value = Get(key);
  if (!value.ok()) return value.status();
  const GgufValue& v = **value;
  if (v.type != GgufType::kArray || !IsFloat(v.array_value.element_type)) {
    return TypeError(key, v, "array of f32 or f64");
  }
  return v.array_value.floats;
}

}  // namespace tinyserve
