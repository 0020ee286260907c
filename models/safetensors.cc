#include "models/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tinyserve {
namespace {

// The reference implementation refuses headers over 100 MB; so do we, before parsing.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr int64_t kMaxElements = int64_t{1} << 40;

Status FileError(const std::string& path, const std::string& what) {
  return InvalidArgument(path + ": not a valid safetensors file: " + what);
}

}  // namespace

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  StatusOr<MappedFile> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  SafetensorsFile st(std::move(file).value(), /*is_mapping=*/true);
  TS_RETURN_IF_ERROR(st.ParseHeader());
  return st;
}

StatusOr<SafetensorsFile> SafetensorsFile::Parse(MappedFile file) {
  SafetensorsFile st(std::move(file), /*is_mapping=*/false);
  TS_RETURN_IF_ERROR(st.ParseHeader());
  return st;
}

Status SafetensorsFile::ParseHeader() {
  const std::string& path = file_.path();
  const uint64_t size = file_.size();
  if (size < 8) {
    return FileError(
        path, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file_.data()[i];
  if (n > size - 8) {
    return FileError(path, "header length " + std::to_string(n) + " runs past the end of the " +
                               std::to_string(size) + "-byte file");
  }
  if (n > kMaxHeaderBytes) {
    return FileError(path, "header length " + std::to_string(n) + " is over the 100 MB limit");
  }
  if (n < 2) return FileError(path, "header length " + std::to_string(n) + " is too short");
  header_bytes_ = n;
  const char* text = reinterpret_cast<const char*>(file_.data() + 8);
  // ordered_json: tensors() keep the header's order.
  nlohmann::ordered_json header =
      nlohmann::ordered_json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return FileError(path, "header is not a JSON object");
  }
  const uint64_t data_size = size - 8 - n;
  const uint64_t data_start = 8 + n;
  struct Span {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::ordered_json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return FileError(path, "__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) {
          return FileError(path, "__metadata__ value \"" + m.key() + "\" is not a string");
        }
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + name + ": ";
    if (!entry.is_object()) return FileError(path, where + "entry is not an object");
    const auto dtype_it = entry.find("dtype");
    const auto shape_it = entry.find("shape");
    const auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      return FileError(path, where + "missing string \"dtype\"");
    }
    const std::string dtype_name = dtype_it->get<std::string>();
    const std::optional<TensorDtype> dtype = ParseTensorDtype(dtype_name);
    if (!dtype) {
      return FileError(path,
                       where + "dtype " + dtype_name + " is not supported (F32, F16 and BF16 are)");
    }
    if (shape_it == entry.end() || !shape_it->is_array()) {
      return FileError(path, where + "missing array \"shape\"");
    }
    SafetensorsTensor t;
    t.name = name;
    t.dtype = *dtype;
    int64_t elements = 1;
    for (const auto& d : *shape_it) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(kMaxElements)) {
        return FileError(path, where + "shape " + shape_it->dump() + " is not a list of sizes");
      }
      t.shape.push_back(d.get<int64_t>());
      if (t.shape.back() != 0 && elements > kMaxElements / t.shape.back()) {
        return FileError(path, where + "shape " + shape_it->dump() + " is implausibly large");
      }
      elements *= t.shape.back();
    }
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
      return FileError(path, where + "\"data_offsets\" is not [begin, end]");
    }
    const uint64_t begin = (*offsets_it)[0].get<uint64_t>();
    const uint64_t end = (*offsets_it)[1].get<uint64_t>();
    if (begin > end) {
      return FileError(path, where + "data_offsets [" + std::to_string(begin) + ", " +
                                 std::to_string(end) + "] end before they begin");
    }
    if (end > data_size) {
      return FileError(path, where + "data_offsets [" + std::to_string(begin) + ", " +
                                 std::to_string(end) + "] run past the end of the data (" +
                                 std::to_string(data_size) + " bytes)");
    }
    const uint64_t want = static_cast<uint64_t>(elements) * TensorDtypeBytes(*dtype);
    if (end - begin != want) {
      return FileError(path, where + "data_offsets [" + std::to_string(begin) + ", " +
                                 std::to_string(end) + "] hold " + std::to_string(end - begin) +
                                 " bytes, but shape " + ShapeString(t.shape) + " of " + dtype_name +
                                 " needs " + std::to_string(want));
    }
    t.data_begin = data_start + begin;
    t.num_bytes = want;
    spans.push_back({begin, end, tensors_.size()});
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      return FileError(path, "tensors " + tensors_[spans[i - 1].tensor].name + " and " +
                                 tensors_[spans[i].tensor].name + " overlap");
    }
  }
  return Status::Ok();
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::ReadF32(const SafetensorsTensor& tensor, float* dst) const {
  ConvertToF32(tensor.dtype, file_.data() + tensor.data_begin, tensor.num_elements(), dst);
}

void SafetensorsFile::ReleasePages(const SafetensorsTensor& tensor) const {
  if (!is_mapping_ || tensor.num_bytes == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(file_.data() + tensor.data_begin);
  const uintptr_t end = begin + tensor.num_bytes;
  // Whole pages inside the tensor only: a neighbour's first or last page may still be needed.
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = end / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

SafetensorsWriteTensor TensorFromFloats(std::string name, std::vector<int64_t> shape,
                                        const float* data) {
  return {std::move(name), std::move(shape), [data](int64_t begin, int64_t count, float* out) {
            std::copy(data + begin, data + begin + count, out);
          }};
}

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                        TensorDtype dtype, const std::map<std::string, std::string>& metadata) {
  // nlohmann's ordered_json keeps the tensors in the given order, as the data is.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<int64_t> counts;
  for (const SafetensorsWriteTensor& t : tensors) {
    int64_t count = 1;
    for (int64_t d : t.shape) count *= d;
    counts.push_back(count);
    const TensorDtype td = t.dtype.value_or(dtype);
    const uint64_t bytes = static_cast<uint64_t>(count) * TensorDtypeBytes(td);
    header[t.name] = {{"dtype", TensorDtypeName(td)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - (text.size() % 8)) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument(path + ": cannot open for writing");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  constexpr int64_t kChunk = 1 << 20;
  std::vector<float> chunk;
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (int64_t begin = 0; begin < counts[i]; begin += kChunk) {
      const int64_t n = std::min(kChunk, counts[i] - begin);
      chunk.resize(n);
      tensors[i].fill(begin, n, chunk.data());
      const TensorDtype td = tensors[i].dtype.value_or(dtype);
      bytes.resize(static_cast<size_t>(n * TensorDtypeBytes(td)));
      ConvertFromF32(td, chunk.data(), n, bytes.data());
      out.write(reinterpret_cast<const char*>(bytes.data()),
                static_cast<std::streamsize>(bytes.size()));
    }
  }
  out.close();
  if (!out) return InvalidArgument(path + ": write failed (disk full?)");
  return Status::Ok();
}

}  // namespace tinyserve
