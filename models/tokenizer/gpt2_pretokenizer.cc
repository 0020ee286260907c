#include "models/tokenizer/gpt2_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>
#include <utility>

namespace tinyserve {
namespace {

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

struct Gpt2PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

StatusOr<std::unique_ptr<Gpt2PreTokenizer>> Gpt2PreTokenizer::Create() {
  StatusOr<std::unique_ptr<Gpt2PreTokenizer>> pre = Create(kGpt2Pattern);
  if (!pre.ok()) return Internal("the GPT-2 pre-tokenizer regex: " + pre.status().message());
  return pre;
}

StatusOr<std::unique_ptr<Gpt2PreTokenizer>> Gpt2PreTokenizer::Create(std::string_view pattern) {
  auto regex = std::make_unique<Regex>();
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                              &error_offset, nullptr);
  if (regex->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgument("PCRE2 rejected the regex at offset " + std::to_string(error_offset) +
                           ": " + reinterpret_cast<const char*>(message));
  }
  // JIT is an optimization; without it (unsupported CPU, no JIT build) the interpreter is used.
  pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Gpt2PreTokenizer>(new Gpt2PreTokenizer(std::move(regex)));
}

Gpt2PreTokenizer::Gpt2PreTokenizer(std::unique_ptr<Regex> regex) : regex_(std::move(regex)) {}
Gpt2PreTokenizer::~Gpt2PreTokenizer() = default;

std::vector<std::string_view> Gpt2PreTokenizer::Split(std::string_view text) const {
  std::vector<std::string_view> chunks;
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t covered = 0;  // text[0, covered) is in chunks
  size_t start = 0;
  while (start < text.size()) {
    int rc = pcre2_match(regex_->code, subject, text.size(), start, 0, match, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // A resource limit (JIT stack, match limit): retry with the interpreter.
      rc = pcre2_match(regex_->code, subject, text.size(), start, PCRE2_NO_JIT, match, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;  // the rest (invalid bytes) becomes one chunk
    size_t begin = start;
    size_t end = start;
    if (rc < 0) {
      // Still failing: make the next character a chunk of its own and go on.
      end = start + 1;
      while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    } else {
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      begin = ovector[0];
      end = ovector[1];
    }
    if (begin > covered) chunks.push_back(text.substr(covered, begin - covered));  // invalid bytes
    if (end > begin) chunks.push_back(text.substr(begin, end - begin));
    covered = end > covered ? end : covered;
    start = end > begin ? end : begin + 1;  // the pattern never matches empty; guard anyway
  }
  if (covered < text.size()) chunks.push_back(text.substr(covered));
  pcre2_match_data_free(match);
  return chunks;
}

}  // namespace tinyserve
