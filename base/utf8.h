// UTF-8 validation and lossy decoding with the "maximal subpart" rule (Unicode §3.9, WHATWG,
// Python's errors="replace", Rust's from_utf8_lossy, hence HF tokenizers and vLLM): each maximal
// prefix of a would-be sequence that cannot be completed becomes one U+FFFD. Pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tinyserve {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Appends the text of `bytes` to *out, each invalid maximal subpart replaced by U+FFFD, and
// returns how many bytes were consumed. If `final` is false, a trailing sequence that is
// incomplete but could still become valid is left unconsumed (the caller keeps it for later);
// if true, it is replaced too and everything is consumed.
size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out);

// Returns true iff `bytes` is well-formed UTF-8.
bool IsValidUtf8(std::string_view bytes);

// `bytes` with every invalid maximal subpart replaced by U+FFFD.
std::string ToValidUtf8(std::string_view bytes);

// The number of code points in well-formed `text` (what Python's len() counts).
size_t Utf8Length(std::string_view text);

}  // namespace tinyserve
