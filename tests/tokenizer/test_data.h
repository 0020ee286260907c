// Helpers for the tokenizer tests: paths into ../shared, the llama.cpp vocab test files, and
// temporary files for loader-error tests.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tinyserve::testing {

inline std::string SharedPath(const std::string& relative) {
  return std::string(TINYSERVE_SHARED_DIR) + "/" + relative;
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The inputs of a llama.cpp vocab .inp file: each string is followed by the separator.
inline std::vector<std::string> ReadVocabInputs(const std::string& path) {
  const std::string separator = "\n__ggml_vocab_test__\n";
  const std::string data = ReadFileBytes(path);
  std::vector<std::string> inputs;
  size_t start = 0;
  while (start < data.size()) {
    const size_t end = data.find(separator, start);
    if (end == std::string::npos) break;
    inputs.push_back(data.substr(start, end - start));
    start = end + separator.size();
  }
  return inputs;
}

// The expected ids of a .out file: one line per input, space-prefixed decimal ids.
inline std::vector<std::vector<int32_t>> ReadVocabOutputs(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<int32_t>> outputs;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<int32_t> ids;
    int32_t id = 0;
    while (fields >> id) ids.push_back(id);
    outputs.push_back(ids);
  }
  return outputs;
}

// A file with the given bytes in a fresh temporary directory, removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& bytes, const std::string& name = "file.bin") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tinyserve_tok_XXXXXX").string();
    const char* dir = mkdtemp(pattern.data());
    dir_ = dir != nullptr ? dir : std::filesystem::temp_directory_path().string();
    path_ = dir_ + "/" + name;
    std::ofstream(path_, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // Replaces the file's contents.
  void Write(const std::string& bytes) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ~TempFile() { std::filesystem::remove_all(dir_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
};

}  // namespace tinyserve::testing
