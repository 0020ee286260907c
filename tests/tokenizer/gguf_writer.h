// GgufWriter: builds GGUF bytes for tests (well-formed files, and broken ones on purpose).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "models/tokenizer/gguf.h"

namespace tinyserve::testing {

class GgufWriter {
 public:
  template <typename T>
  GgufWriter& Raw(T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out_.append(bytes, sizeof(T));
    return *this;
  }
  GgufWriter& Str(const std::string& s) {
    Raw<uint64_t>(s.size());
    out_ += s;
    return *this;
  }
  GgufWriter& Type(GgufType t) { return Raw(static_cast<uint32_t>(t)); }
  GgufWriter& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    out_ += "GGUF";
    return Raw(version).Raw(n_tensors).Raw(n_kv);
  }
  // key + type; the caller appends the value.
  GgufWriter& Key(const std::string& key, GgufType t) { return Str(key).Type(t); }
  GgufWriter& KeyString(const std::string& key, const std::string& value) {
    return Key(key, GgufType::kString).Str(value);
  }
  GgufWriter& KeyStringArray(const std::string& key, const std::vector<std::string>& values) {
    Key(key, GgufType::kArray).Type(GgufType::kString).Raw<uint64_t>(values.size());
    for (const std::string& v : values) Str(v);
    return *this;
  }
  GgufWriter& KeyF32Array(const std::string& key, const std::vector<float>& values) {
    Key(key, GgufType::kArray).Type(GgufType::kFloat32).Raw<uint64_t>(values.size());
    for (float v : values) Raw(v);
    return *this;
  }
  GgufWriter& KeyI32Array(const std::string& key, const std::vector<int32_t>& values) {
    Key(key, GgufType::kArray).Type(GgufType::kInt32).Raw<uint64_t>(values.size());
    for (int32_t v : values) Raw(v);
    return *this;
  }
  GgufWriter& Tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                     uint64_t offset) {
    Str(name).Raw<uint32_t>(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) Raw(d);
    return Raw(type).Raw(offset);
  }
  GgufWriter& PadTo(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_ += '\0';
    return *this;
  }
  GgufWriter& Bytes(const std::string& bytes) {
    out_ += bytes;
    return *this;
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

}  // namespace tinyserve::testing
