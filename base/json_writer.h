// JSON writing primitives for the hot paths that build their JSON text directly (stream chunks,
// logprobs) instead of through an nlohmann::json tree. Each appends exactly what nlohmann::json's
// compact dump (error_handler_t::replace, ensure_ascii false) writes for the same value, so the
// two ways can be mixed and compared byte for byte. Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tinyserve {

// `text` as a JSON string literal (quotes included): `"`, `\`, \b \f \n \r \t and \u00XX for the
// other control bytes escaped, everything else verbatim; text that is not well-formed UTF-8 goes
// through nlohmann's own lossy dump (U+FFFD).
void AppendJsonString(std::string_view text, std::string* out);
void AppendJsonInt(int64_t value, std::string* out);
// A finite double as nlohmann writes it (Grisu2 shortest form: "-0.25", "-9999.0", "1e-05");
// NaN and infinities as null.
void AppendJsonDouble(double value, std::string* out);

}  // namespace tinyserve
