// The safetensors reader on arbitrary bytes: every input parses or gives an error naming the file;
// a file that parses has every tensor's bytes inside the file, sized by its dtype and shape, and
// each tensor converts to fp32.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "models/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tinyserve;
  StatusOr<SafetensorsFile> file = SafetensorsFile::Parse(MappedFile::FromBytes(
      "fuzz.safetensors", std::string(reinterpret_cast<const char*>(data), size)));
  if (!file.ok()) {
    FUZZ_CHECK(file.status().message().find("fuzz.safetensors") != std::string::npos);
    return 0;
  }
  FUZZ_CHECK(8 + file->header_bytes() <= size);
  std::vector<float> values;
  for (const SafetensorsTensor& t : file->tensors()) {
    FUZZ_CHECK(file->Find(t.name) == &t);
    FUZZ_CHECK(t.data_begin + t.num_bytes <= size);
    FUZZ_CHECK(t.num_elements() >= 0);
    FUZZ_CHECK(static_cast<uint64_t>(t.num_elements() * TensorDtypeBytes(t.dtype)) == t.num_bytes);
    values.resize(static_cast<size_t>(t.num_elements()));
    file->ReadF32(t, values.data());
  }
  return 0;
}
