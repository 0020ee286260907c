#include "server/protocol/sampling_fields.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>

#include "server/protocol/json_fields.h"

namespace tinyserve::protocol {
namespace {

// Python's repr of a float for messages: "1.5", "-0.1", "2.0".
std::string FloatText(float v) {
  std::ostringstream s;
  s << v;
  std::string text = s.str();
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

std::optional<ApiError> RangeError(const std::string& param, const std::string& message) {
  return ApiError::BadRequest(message, param);
}

std::optional<ApiError> ParseSeed(const nlohmann::json& body, std::optional<uint64_t>* out) {
  auto it = body.find("seed");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_number_unsigned()) {
    *out = it->get<uint64_t>();
  } else if (it->is_number_integer()) {
    *out = static_cast<uint64_t>(it->get<int64_t>());
  } else if (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>() &&
             std::fabs(it->get<double>()) < 9.2e18) {
    *out = static_cast<uint64_t>(static_cast<int64_t>(it->get<double>()));  // 7.0, as pydantic
  } else {
    return ApiError::BadRequest("`seed` must be an integer, got " + JsonTypePhrase(*it), "seed");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const nlohmann::json& body, std::vector<std::string>* out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  std::vector<std::string> stop;
  if (it->is_string()) {
    stop.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const auto& s : *it) {
      if (!s.is_string()) {
        return ApiError::BadRequest("`stop` must be a string or an array of strings", "stop");
      }
      stop.push_back(s.get<std::string>());
    }
  } else {
    return ApiError::BadRequest(
        "`stop` must be a string or an array of strings, got " + JsonTypePhrase(*it), "stop");
  }
  for (const auto& s : stop) {
    if (s.empty()) return ApiError::BadRequest("stop cannot contain an empty string.", "stop");
  }
  *out = std::move(stop);
  return std::nullopt;
}

// `key`: absent or null (*out unchanged), or an array of ids in [0, vocab_size) (else a 400 whose
// message for a bad id is out_of_vocab(id)).
std::optional<ApiError> ParseTokenIdArray(const nlohmann::json& body, const std::string& key,
                                          int32_t vocab_size,
                                          const std::function<std::string(int32_t)>& out_of_vocab,
                                          std::optional<std::vector<int32_t>>* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  const std::string shape = "`" + key + "` must be an array of integers";
  if (!it->is_array()) return ApiError::BadRequest(shape + ", got " + JsonTypePhrase(*it), key);
  std::vector<int32_t> ids;
  for (const auto& v : *it) {
    int32_t id = 0;
    if (!AsInt32(v, &id)) return ApiError::BadRequest(shape, key);
    if (id < 0 || id >= vocab_size) return ApiError::BadRequest(out_of_vocab(id), key);
    ids.push_back(id);
  }
  *out = std::move(ids);
  return std::nullopt;
}

std::optional<ApiError> ParseStopTokenIds(const nlohmann::json& body, int32_t vocab_size,
                                          std::vector<int32_t>* out) {
  std::optional<std::vector<int32_t>> ids;
  TS_RETURN_IF_API_ERROR(ParseTokenIdArray(
      body, "stop_token_ids", vocab_size,
      [](int32_t id) { return "Token id " + std::to_string(id) + " is out of vocabulary"; }, &ids));
  if (ids) *out = std::move(*ids);
  return std::nullopt;
}

std::optional<ApiError> ParseStreamOptions(const nlohmann::json& body,
                                           std::optional<StreamOptions>* out) {
  auto it = body.find("stream_options");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) {
    return ApiError::BadRequest("`stream_options` must be an object, got " + JsonTypePhrase(*it),
                                "stream_options");
  }
  StreamOptions options;
  TS_RETURN_IF_API_ERROR(
      GetBool(*it, "include_usage", "stream_options.include_usage", &options.include_usage));
  TS_RETURN_IF_API_ERROR(GetBool(*it, "continuous_usage_stats",
                                 "stream_options.continuous_usage_stats",
                                 &options.continuous_usage_stats));
  *out = options;
  return std::nullopt;
}

// OpenAI's logit_bias: {"<token id>": bias}; biases clamped to [-100, 100] (vLLM), ids checked
// against the vocabulary after every key parsed (vLLM lists all of the bad ones; here in sorted
// key order). The result is sorted by id.
std::optional<ApiError> ParseLogitBias(const nlohmann::json& body, int32_t vocab_size,
                                       std::vector<std::pair<int32_t, float>>* out) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) {
    return ApiError::BadRequest("`logit_bias` must be an object, got " + JsonTypePhrase(*it),
                                "logit_bias");
  }
  std::vector<std::pair<int32_t, float>> bias;
  std::string out_of_vocab;
  for (auto entry = it->begin(); entry != it->end(); ++entry) {
    const std::string& key = entry.key();
    int64_t id = 0;
    const char* end = key.data() + key.size();
    const char* begin = key.data() + (!key.empty() && key[0] == '+' ? 1 : 0);
    auto [ptr, ec] = std::from_chars(begin, end, id);
    if (key.empty() || ec != std::errc() || ptr != end) {
      return ApiError::BadRequest("Found token_id `" + key +
                                      "` in logit_bias but token_id must be an integer or string "
                                      "representing an integer",
                                  "logit_bias");
    }
    if (!entry->is_number()) {
      return ApiError::BadRequest(
          "`logit_bias` values must be numbers, got " + JsonTypePhrase(*entry) + " for " + key,
          "logit_bias");
    }
    if (id < 0 || id >= vocab_size) {
      out_of_vocab += (out_of_vocab.empty() ? "" : ", ") + std::to_string(id);
      continue;
    }
    const double value = entry->get<double>();
    if (std::isnan(value)) {
      return ApiError::BadRequest("`logit_bias` values must be numbers", "logit_bias");
    }
    bias.emplace_back(static_cast<int32_t>(id),
                      static_cast<float>(std::clamp(value, -100.0, 100.0)));
  }
  if (!out_of_vocab.empty()) {
    return ApiError::BadRequest("token_id(s) [" + out_of_vocab +
                                    "] in logit_bias contain out-of-vocab token ids. Vocabulary "
                                    "size: " +
                                    std::to_string(vocab_size),
                                "logit_bias");
  }
  // "5" and "05" are one id with one value, the last key's (keys come in sorted order here, not
  // the body's as in vLLM's dict). Sorting keeps this O(n log n) for a vocabulary-sized map.
  std::stable_sort(bias.begin(), bias.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<int32_t, float>> unique;
  unique.reserve(bias.size());
  for (const auto& b : bias) {
    if (!unique.empty() && unique.back().first == b.first) {
      unique.back().second = b.second;
    } else {
      unique.push_back(b);
    }
  }
  *out = std::move(unique);
  return std::nullopt;
}

// vLLM's allowed_token_ids: null, or a non-empty array of ids in [0, vocab_size) (its messages).
std::optional<ApiError> ParseAllowedTokenIds(const nlohmann::json& body, int32_t vocab_size,
                                             std::vector<int32_t>* out) {
  std::optional<std::vector<int32_t>> ids;
  TS_RETURN_IF_API_ERROR(ParseTokenIdArray(
      body, "allowed_token_ids", vocab_size,
      [](int32_t) { return std::string("allowed_token_ids contains out-of-vocab token id!"); },
      &ids));
  if (ids && ids->empty()) {
    return ApiError::BadRequest("allowed_token_ids is not None and empty!", "allowed_token_ids");
  }
  if (ids) *out = std::move(*ids);
  return std::nullopt;
}

// Fields vLLM honours that this server does not: refused (400) rather than silently ignored,
// since ignoring them changes what the client gets.
std::optional<ApiError> RejectUnsupported(const nlohmann::json& body) {
  bool beam_search = false;
  TS_RETURN_IF_API_ERROR(GetBool(body, "use_beam_search", "use_beam_search", &beam_search));
  if (beam_search) {
    return ApiError::BadRequest("Beam search is not supported by this server.", "use_beam_search");
  }
  std::optional<int32_t> best_of;
  TS_RETURN_IF_API_ERROR(GetInt32(body, "best_of", "best_of", &best_of));
  if (best_of && *best_of != 1) {
    return ApiError::BadRequest("best_of is not supported by this server; use n.", "best_of");
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseMaxTokensField(const nlohmann::json& body, const std::string& key,
                                            std::optional<int32_t>* out) {
  std::optional<int32_t> value;
  TS_RETURN_IF_API_ERROR(GetInt32(body, key, key, &value));
  if (!value) return std::nullopt;
  if (*value < 1) {
    return RangeError(key, key + " must be at least 1, got " + std::to_string(*value) + ".");
  }
  *out = value;
  return std::nullopt;
}

std::optional<ApiError> ParseSamplingFields(const nlohmann::json& body, int32_t vocab_size,
                                            SamplingFields* out) {
  SamplingFields& f = *out;
  TS_RETURN_IF_API_ERROR(RejectUnsupported(body));
  TS_RETURN_IF_API_ERROR(GetFloat(body, "temperature", "temperature", &f.temperature));
  if (f.temperature < 0.0f) {
    return RangeError("temperature",
                      "temperature must be non-negative, got " + FloatText(f.temperature) + ".");
  }
  TS_RETURN_IF_API_ERROR(GetFloat(body, "top_p", "top_p", &f.top_p));
  if (!(f.top_p > 0.0f && f.top_p <= 1.0f)) {
    return RangeError("top_p", "top_p must be in (0, 1], got " + FloatText(f.top_p) + ".");
  }
  TS_RETURN_IF_API_ERROR(GetInt32(body, "top_k", "top_k", &f.top_k));
  if (f.top_k < -1) {
    return RangeError("top_k", "top_k must be -1 or 0 (disable), or at least 1, got " +
                                   std::to_string(f.top_k) + ".");
  }
  TS_RETURN_IF_API_ERROR(GetFloat(body, "min_p", "min_p", &f.min_p));
  if (!(f.min_p >= 0.0f && f.min_p <= 1.0f)) {
    return RangeError("min_p", "min_p must be in [0, 1], got " + FloatText(f.min_p) + ".");
  }
  TS_RETURN_IF_API_ERROR(
      GetFloat(body, "presence_penalty", "presence_penalty", &f.presence_penalty));
  if (!(f.presence_penalty >= -2.0f && f.presence_penalty <= 2.0f)) {
    return RangeError("presence_penalty", "presence_penalty must be in [-2, 2], got " +
                                              FloatText(f.presence_penalty) + ".");
  }
  TS_RETURN_IF_API_ERROR(
      GetFloat(body, "frequency_penalty", "frequency_penalty", &f.frequency_penalty));
  if (!(f.frequency_penalty >= -2.0f && f.frequency_penalty <= 2.0f)) {
    return RangeError("frequency_penalty", "frequency_penalty must be in [-2, 2], got " +
                                               FloatText(f.frequency_penalty) + ".");
  }
  TS_RETURN_IF_API_ERROR(
      GetFloat(body, "repetition_penalty", "repetition_penalty", &f.repetition_penalty));
  if (!(f.repetition_penalty > 0.0f)) {
    return RangeError("repetition_penalty", "repetition_penalty must be greater than zero, got " +
                                                FloatText(f.repetition_penalty) + ".");
  }
  TS_RETURN_IF_API_ERROR(GetInt32(body, "n", "n", &f.n));
  if (f.n < 1) return RangeError("n", "n must be at least 1, got " + std::to_string(f.n) + ".");
  if (f.n > kMaxN) {
    return RangeError(
        "n", "n must be at most " + std::to_string(kMaxN) + ", got " + std::to_string(f.n) + ".");
  }
  TS_RETURN_IF_API_ERROR(ParseSeed(body, &f.seed));
  TS_RETURN_IF_API_ERROR(ParseStop(body, &f.stop));
  TS_RETURN_IF_API_ERROR(ParseStopTokenIds(body, vocab_size, &f.stop_token_ids));
  TS_RETURN_IF_API_ERROR(ParseLogitBias(body, vocab_size, &f.logit_bias));
  TS_RETURN_IF_API_ERROR(ParseAllowedTokenIds(body, vocab_size, &f.allowed_token_ids));
  TS_RETURN_IF_API_ERROR(GetBool(body, "include_stop_str_in_output", "include_stop_str_in_output",
                                 &f.include_stop_str_in_output));
  TS_RETURN_IF_API_ERROR(GetBool(body, "ignore_eos", "ignore_eos", &f.ignore_eos));
  TS_RETURN_IF_API_ERROR(GetInt32(body, "min_tokens", "min_tokens", &f.min_tokens));
  if (f.min_tokens < 0) {
    return RangeError("min_tokens", "min_tokens must be greater than or equal to 0, got " +
                                        std::to_string(f.min_tokens) + ".");
  }
  TS_RETURN_IF_API_ERROR(
      GetBool(body, "skip_special_tokens", "skip_special_tokens", &f.skip_special_tokens));
  TS_RETURN_IF_API_ERROR(GetInt32(body, "priority", "priority", &f.priority));
  TS_RETURN_IF_API_ERROR(GetBool(body, "stream", "stream", &f.stream));
  TS_RETURN_IF_API_ERROR(ParseStreamOptions(body, &f.stream_options));
  if (f.stream_options && !f.stream) {
    return ApiError::BadRequest("Stream options can only be defined when `stream=True`.",
                                "stream_options");
  }
  TS_RETURN_IF_API_ERROR(GetInt32(body, "truncate_prompt_tokens", "truncate_prompt_tokens",
                                  &f.truncate_prompt_tokens));
  if (f.truncate_prompt_tokens && *f.truncate_prompt_tokens < 1 &&
      *f.truncate_prompt_tokens != -1) {
    return RangeError(
        "truncate_prompt_tokens",
        "truncate_prompt_tokens must be -1 (the model's context) or at least 1, got " +
            std::to_string(*f.truncate_prompt_tokens) + ".");
  }
  TS_RETURN_IF_API_ERROR(GetInt32(body, "prompt_logprobs", "prompt_logprobs", &f.prompt_logprobs));
  if (f.prompt_logprobs) {
    int32_t& n = *f.prompt_logprobs;
    if (n < -1) {
      return RangeError("prompt_logprobs", "`prompt_logprobs` must be a positive value or -1.");
    }
    if (n == -1) n = vocab_size;  // vLLM: the whole vocabulary
    if (n > kMaxLogprobs) {
      return RangeError("prompt_logprobs",
                        "Requested prompt logprobs of " + std::to_string(n) +
                            ", which is greater than max allowed: " + std::to_string(kMaxLogprobs));
    }
    if (f.stream && n > 0) {
      return RangeError("prompt_logprobs",
                        "`prompt_logprobs` are not available when `stream=True`.");
    }
  }
  std::optional<std::string> user;
  TS_RETURN_IF_API_ERROR(GetString(body, "user", "user", &user));
  TS_RETURN_IF_API_ERROR(ParseStructuredOutput(body, &f.structured));
  return std::nullopt;
}

std::optional<ApiError> TruncatePromptTokens(const SamplingFields& f, int32_t max_model_len,
                                             std::vector<int32_t>* ids) {
  if (!f.truncate_prompt_tokens) return std::nullopt;
  const int32_t k = *f.truncate_prompt_tokens == -1 ? max_model_len : *f.truncate_prompt_tokens;
  if (k > max_model_len) {
    return RangeError("truncate_prompt_tokens",
                      "truncate_prompt_tokens value (" + std::to_string(k) +
                          ") is greater than max_model_len (" + std::to_string(max_model_len) +
                          "). Please, select a smaller truncation size.");
  }
  if (ids->size() > static_cast<size_t>(k)) ids->erase(ids->begin(), ids->end() - k);
  return std::nullopt;
}

ApiErrorOr<SamplingParams> ToSamplingParams(const SamplingFields& f, int32_t num_prompt_tokens,
                                            int32_t max_model_len) {
  const std::string n_text = std::to_string(max_model_len);
  const std::string p_text = std::to_string(num_prompt_tokens);
  int32_t max_tokens = 0;
  if (f.max_tokens) {
    const int64_t total = static_cast<int64_t>(num_prompt_tokens) + *f.max_tokens;
    if (total > max_model_len) {
      return ApiError::BadRequest(
          "This model's maximum context length is " + n_text + " tokens. However, you requested " +
              std::to_string(total) + " tokens (" + p_text + " in the messages, " +
              std::to_string(*f.max_tokens) +
              " in the completion). Please reduce the length of the messages or completion.",
          "max_tokens");
    }
    max_tokens = *f.max_tokens;
  } else {
    if (num_prompt_tokens >= max_model_len) {
      return ApiError::BadRequest("This model's maximum context length is " + n_text +
                                      " tokens. However, your request has " + p_text +
                                      " input tokens. Please reduce the length of the input "
                                      "messages.",
                                  "messages");
    }
    max_tokens = max_model_len - num_prompt_tokens;
  }
  if (f.min_tokens > max_tokens) {
    return ApiError::BadRequest(
        "min_tokens must be less than or equal to max_tokens=" + std::to_string(max_tokens) +
            ", got " + std::to_string(f.min_tokens) + ".",
        "min_tokens");
  }
  if (max_tokens == 0) {  // echo scoring: the engine makes one token that nobody sees
    if (num_prompt_tokens >= max_model_len) {
      return ApiError::BadRequest(
          "This model's maximum context length is " + n_text +
              " tokens. However, your prompt has " + p_text +
              " tokens, and scoring a prompt (echo with max_tokens 0) needs it to be at "
              "most " +
              std::to_string(max_model_len - 1) + " tokens.",
          "prompt");
    }
    max_tokens = 1;
  }
  SamplingParams p;
  p.temperature = f.temperature;
  p.top_k = f.top_k;
  p.top_p = f.top_p;
  p.min_p = f.min_p;
  p.presence_penalty = f.presence_penalty;
  p.frequency_penalty = f.frequency_penalty;
  p.repetition_penalty = f.repetition_penalty;
  p.seed = f.seed;
  p.max_tokens = max_tokens;
  p.min_tokens = f.min_tokens;
  p.stop_token_ids = f.stop_token_ids;
  p.logit_bias = f.logit_bias;
  p.allowed_token_ids = f.allowed_token_ids;
  p.ignore_eos = f.ignore_eos;
  p.logprobs = f.logprobs;
  p.prompt_logprobs = f.prompt_logprobs;
  // Every field was checked while parsing; this is the safety net for the engine's contract.
  Status valid = p.Validate(std::numeric_limits<int32_t>::max());
  if (!valid.ok()) return ApiError::BadRequest(valid.message());
  return p;
}

}  // namespace tinyserve::protocol
