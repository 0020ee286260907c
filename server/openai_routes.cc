#include "server/openai_routes.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <future>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/utf8.h"
#include "server/generation_job.h"
#include "server/protocol/chat_request.h"
#include "server/protocol/chat_template.h"
#include "server/protocol/json_fields.h"
#include "server/protocol/responses.h"
#include "server/structured_vocabulary.h"

namespace tinyserve {

using protocol::ApiError;
using protocol::ApiErrorOr;

namespace {

// Constant-time (in the secret's content) comparison of a presented key with the configured one.
bool KeysEqual(const std::string& presented, const std::string& expected) {
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char a = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned char>(a ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

void SendJson(HttpResponse& res, const nlohmann::ordered_json& body) {
  res.status = 200;
  res.SetContent(protocol::DumpJson(body), "application/json");
}

}  // namespace

OpenAiRoutes::OpenAiRoutes(OpenAiContext context)
    : context_(std::move(context)),
      created_(static_cast<int64_t>(std::time(nullptr))),
      gate_(AdmissionLimits{context_.max_queue_len, context_.max_num_queued_tokens}),
      structured_vocabulary_(BuildStructuredVocabulary(
          *context_.tokenizer,
          context_.engine != nullptr ? context_.engine->vocab_size()
                                     : context_.tokenizer->vocab_size(),
          context_.engine != nullptr ? context_.engine->eos_token_ids()
                                     : std::vector<int32_t>{context_.tokenizer->eos_id()})) {}

ApiErrorOr<std::shared_ptr<const structured::CompiledGrammar>>
OpenAiRoutes::CompileStructuredOutput(const protocol::SamplingFields& fields) {
  if (!fields.structured) return std::shared_ptr<const structured::CompiledGrammar>();
  const protocol::StructuredOutput& s = *fields.structured;
  StatusOr<std::shared_ptr<const structured::CompiledGrammar>> grammar =
      grammar_cache_.Get(s.spec, structured_vocabulary_);
  if (!grammar.ok()) {
    return ApiError::BadRequest(
        "Invalid structured output `" + s.param + "`: " + grammar.status().message(), s.param);
  }
  return std::move(grammar).value();
}

void OpenAiRoutes::CountStructuredOutput(const protocol::SamplingFields& fields) const {
  if (!fields.structured || context_.metrics == nullptr) return;
  const auto kind = static_cast<size_t>(fields.structured->spec.kind);
  if (kind < context_.metrics->structured_output_requests.size()) {
    context_.metrics->structured_output_requests[kind]->Increment();
  }
}

void OpenAiRoutes::SendError(HttpResponse& res, const ApiError& error) {
  res.status = error.http_status;
  res.SetContent(protocol::DumpJson(error.ToJson()), "application/json");
}

void OpenAiRoutes::Register(HttpRouter& router) {
  router.Post("/v1/completions",
              [this](const HttpRequest& req, HttpResponse& res) { HandleCompletions(req, res); });
  router.Post("/v1/chat/completions",
              [this](const HttpRequest& req, HttpResponse& res) { HandleChat(req, res); });
  router.Get("/v1/models",
             [this](const HttpRequest& req, HttpResponse& res) { HandleModels(req, res); });
  router.Get("/version",
             [this](const HttpRequest& req, HttpResponse& res) { HandleVersion(req, res); });
  router.Post("/tokenize",
              [this](const HttpRequest& req, HttpResponse& res) { HandleTokenize(req, res); });
  router.Post("/detokenize",
              [this](const HttpRequest& req, HttpResponse& res) { HandleDetokenize(req, res); });
  router.Post("/reset_prefix_cache", [this](const HttpRequest& req, HttpResponse& res) {
    HandleResetPrefixCache(req, res);
  });
}

bool OpenAiRoutes::TakesJsonBody(const std::string& method, const std::string& path) {
  return method == "POST" && (path == "/v1/completions" || path == "/v1/chat/completions" ||
                              path == "/tokenize" || path == "/detokenize");
}

std::optional<ApiError> OpenAiRoutes::CheckAuthorization(const HttpRequest& req) const {
  if (context_.api_key.empty()) return std::nullopt;
  if (req.path != "/v1" && req.path.rfind("/v1/", 0) != 0 && req.path != "/reset_prefix_cache") {
    return std::nullopt;
  }
  // The header value as sent (NUL bytes included), not decoded.
  const auto range = req.headers.equal_range("Authorization");
  if (range.first == range.second) {
    return ApiError::Unauthorized(
        "Missing API key: send the header `Authorization: Bearer <key>`.");
  }
  const std::string& header = range.first->second;
  const std::string prefix = "Bearer ";
  if (std::next(range.first) == range.second && header.size() > prefix.size() &&
      header.compare(0, prefix.size(), prefix) == 0 &&
      KeysEqual(header.substr(prefix.size()), context_.api_key)) {
    return std::nullopt;
  }
  return ApiError::Unauthorized("Incorrect API key provided.");
}

std::optional<ApiError> OpenAiRoutes::CheckModel(const std::optional<std::string>& model) const {
  if (model && *model != context_.served_model_name) return ApiError::ModelNotFound(*model);
  return std::nullopt;
}

std::optional<ApiError> OpenAiRoutes::CheckNumChoices(size_t num_prompts, int32_t n) const {
  // A request is admitted whole (its prompts x n engine requests at once), so one larger than
  // the queue would be refused (503) on every try: a 400 instead.
  const int64_t max_reqs = gate_.limits().max_num_queued_reqs;
  const int64_t num_choices = static_cast<int64_t>(num_prompts) * n;
  if (max_reqs > 0 && n > max_reqs) {
    return ApiError::BadRequest("n = " + std::to_string(n) + " is more than the server's queue " +
                                    "can ever hold (--max-num-queued-reqs " +
                                    std::to_string(max_reqs) + ").",
                                "n");
  }
  if (max_reqs > 0 && num_choices > max_reqs) {
    return ApiError::BadRequest("The request asks for " + std::to_string(num_choices) +
                                    " choices (" + std::to_string(num_prompts) +
                                    " prompts x n = " + std::to_string(n) +
                                    "), more than the server's queue can ever hold "
                                    "(--max-num-queued-reqs " +
                                    std::to_string(max_reqs) + ").",
                                "n");
  }
  const int64_t limit = context_.max_choices_per_request;
  if (limit > 0 && num_choices > limit) {
    return ApiError::BadRequest("The request asks for " + std::to_string(num_choices) +
                                    " choices (" + std::to_string(num_prompts) +
                                    " prompts x n = " + std::to_string(n) + "); the limit is " +
                                    std::to_string(limit) + " (--max-choices-per-request).",
                                "n");
  }
  return std::nullopt;
}

std::optional<ApiError> OpenAiRoutes::CheckLogprobEntries(
    const std::vector<ChoiceSpec>& specs) const {
  const int64_t limit = context_.max_logprobs_per_request;
  if (limit <= 0) return std::nullopt;
  int64_t total = 0;
  for (const ChoiceSpec& spec : specs) {
    const SamplingParams& p = spec.params;
    if (p.prompt_logprobs) {  // every prompt token after the first
      total += static_cast<int64_t>(spec.prompt_ids.size() - 1) * (1 + *p.prompt_logprobs);
    }
    if (p.logprobs) total += static_cast<int64_t>(p.max_tokens) * (1 + *p.logprobs);
  }
  if (total <= limit) return std::nullopt;
  return ApiError::BadRequest(
      "The response could carry " + std::to_string(total) +
          " logprob entries (choices x scored tokens x (1 + top logprobs), prompt tokens included "
          "with echo or prompt_logprobs); the limit is " +
          std::to_string(limit) +
          " (--max-logprobs-per-request). Ask for fewer choices, tokens or logprobs.",
      "logprobs");
}

std::optional<ApiError> OpenAiRoutes::CheckServing() const {
  if (context_.engine != nullptr && context_.engine->is_dead()) {
    return ApiError::Unavailable("The engine is dead after a fatal error (" +
                                 context_.engine->death_status().ToString() +
                                 "); restart the server.");
  }
  const bool healthy =
      context_.engine != nullptr && (!context_.is_healthy || context_.is_healthy());
  if (!healthy) return ApiError::Unavailable("The engine is not running.");
  return std::nullopt;
}

void OpenAiRoutes::HandleModels(const HttpRequest&, HttpResponse& res) const {
  const std::string& name = context_.served_model_name;
  nlohmann::ordered_json permission = {{"id", protocol::NewRequestId("modelperm-")},
                                       {"object", "model_permission"},
                                       {"created", created_},
                                       {"allow_create_engine", false},
                                       {"allow_sampling", true},
                                       {"allow_logprobs", true},
                                       {"allow_search_indices", false},
                                       {"allow_view", true},
                                       {"allow_fine_tuning", false},
                                       {"organization", "*"},
                                       {"group", nullptr},
                                       {"is_blocking", false}};
  nlohmann::ordered_json model = {
      {"id", name},
      {"object", "model"},
      {"created", created_},
      {"owned_by", "tinyserve"},
      {"root", context_.model_root.empty() ? name : context_.model_root},
      {"parent", nullptr},
      {"max_model_len", context_.max_model_len},
      {"permission", nlohmann::ordered_json::array({permission})}};
  SendJson(res, {{"object", "list"}, {"data", nlohmann::ordered_json::array({model})}});
}

void OpenAiRoutes::HandleVersion(const HttpRequest&, HttpResponse& res) const {
  SendJson(res, {{"version", context_.version}});
}

void OpenAiRoutes::HandleResetPrefixCache(const HttpRequest& req, HttpResponse& res) const {
  // vLLM's boolean query parameters (FastAPI's spellings); reset_external names a KV connector's
  // cache, and there is none here.
  bool reset_running_requests = false;
  for (const char* name : {"reset_running_requests", "reset_external"}) {
    if (!req.HasParam(name)) continue;
    std::string value = req.ParamValue(name);
    std::transform(value.begin(), value.end(), value.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    bool flag = false;
    if (value == "true" || value == "1" || value == "yes" || value == "on") {
      flag = true;
    } else if (value != "false" && value != "0" && value != "no" && value != "off") {
      return SendError(res, ApiError::BadRequest(std::string("Query parameter `") + name +
                                                     "` must be true or false, not `" +
                                                     req.ParamValue(name) + "`.",
                                                 name));
    }
    if (std::string(name) == "reset_running_requests") reset_running_requests = flag;
  }
  if (context_.engine == nullptr) {
    return SendError(res, ApiError::Unavailable("the engine is not running"));
  }
  // Done by the engine thread between two steps: at most one step's wait.
  std::future<bool> reset = context_.engine->RequestPrefixCacheReset(reset_running_requests);
  if (reset.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    return SendError(res, ApiError::Unavailable("the engine did not answer the reset in 60 s"));
  }
  if (reset.get()) {
    res.status = 200;
    return;
  }
  if (context_.engine->is_dead()) {
    return SendError(res, ApiError::Unavailable("the engine is dead: " +
                                                context_.engine->death_status().ToString()));
  }
  // vLLM's answer when running requests hold KV blocks (and also when the server stops first).
  SendError(res, ApiError::Make(409,
                                "Prefix cache reset failed: requests hold KV blocks (send "
                                "reset_running_requests=true to preempt them first)."));
}

void OpenAiRoutes::HandleTokenize(const HttpRequest& req, HttpResponse& res) const {
  ApiErrorOr<nlohmann::json> body = protocol::ParseJsonBody(req.body);
  if (!body.ok()) return SendError(res, body.error());
  std::optional<std::string> model;
  if (auto e = protocol::GetString(*body, "model", "model", &model)) return SendError(res, *e);
  if (auto e = CheckModel(model)) return SendError(res, *e);
  const Tokenizer& tok = *context_.tokenizer;
  std::vector<int32_t> ids;
  const bool has_prompt = body->contains("prompt");
  const bool has_messages = body->contains("messages");
  if (has_prompt == has_messages) {
    return SendError(res,
                     ApiError::BadRequest("Exactly one of `prompt` and `messages` is required.",
                                          has_prompt ? "messages" : "prompt"));
  }
  if (has_prompt) {
    std::optional<std::string> prompt;
    if (auto e = protocol::GetString(*body, "prompt", "prompt", &prompt)) {
      return SendError(res, *e);
    }
    if (!prompt) return SendError(res, ApiError::BadRequest("`prompt` must be a string", "prompt"));
    bool add_special_tokens = true;
    if (auto e = protocol::GetBool(*body, "add_special_tokens", "add_special_tokens",
                                   &add_special_tokens)) {
      return SendError(res, *e);
    }
    ids = tok.Encode(*prompt, add_special_tokens && tok.add_bos_by_default());
  } else {
    // The chat form renders the messages as /v1/chat/completions does (same ids, same count).
    const nlohmann::ordered_json ordered_tools = protocol::OrderedToolsOf(*body, req.body);
    ApiErrorOr<protocol::ChatRequest> chat =
        protocol::ParseChatRequest(*body, context_.tokenizer->vocab_size(),
                                   ordered_tools.is_null() ? nullptr : &ordered_tools);
    if (!chat.ok()) return SendError(res, chat.error());
    StatusOr<protocol::RenderedChat> rendered =
        protocol::RenderChat(context_.chat_template, chat->messages, chat->add_generation_prompt,
                             /*today=*/{}, chat->tool_fields.tools);
    if (!rendered.ok()) return SendError(res, ApiError::FromStatus(rendered.status(), "messages"));
    ids = protocol::EncodeChatPrompt(context_.chat_template, *rendered, tok);
  }
  nlohmann::ordered_json out = {
      {"count", ids.size()}, {"max_model_len", context_.max_model_len}, {"tokens", ids}};
  bool return_token_strs = false;
  if (auto e =
          protocol::GetBool(*body, "return_token_strs", "return_token_strs", &return_token_strs)) {
    return SendError(res, *e);
  }
  if (return_token_strs) {
    nlohmann::ordered_json strs = nlohmann::ordered_json::array();
    for (size_t i = 0; i < ids.size(); ++i) {
      strs.push_back(ToValidUtf8(tok.DecodePiece(i == 0 ? -1 : ids[i - 1], ids[i])));
    }
    out["token_strs"] = std::move(strs);
  }
  SendJson(res, out);
}

void OpenAiRoutes::HandleDetokenize(const HttpRequest& req, HttpResponse& res) const {
  ApiErrorOr<nlohmann::json> body = protocol::ParseJsonBody(req.body);
  if (!body.ok()) return SendError(res, body.error());
  std::optional<std::string> model;
  if (auto e = protocol::GetString(*body, "model", "model", &model)) return SendError(res, *e);
  if (auto e = CheckModel(model)) return SendError(res, *e);
  const auto it = body->find("tokens");
  if (it == body->end() || !it->is_array()) {
    return SendError(res, ApiError::BadRequest("`tokens` must be an array of token ids", "tokens"));
  }
  const int32_t vocab = context_.tokenizer->vocab_size();
  std::vector<int32_t> ids;
  ids.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    int32_t id = 0;
    if (!protocol::AsInt32((*it)[i], &id) || id < 0 || id >= vocab) {
      return SendError(res, ApiError::BadRequest("`tokens[" + std::to_string(i) +
                                                     "]` must be a token id in [0, " +
                                                     std::to_string(vocab) + ")",
                                                 "tokens"));
    }
    ids.push_back(id);
  }
  SendJson(res, {{"prompt", ToValidUtf8(context_.tokenizer->Decode(ids))}});
}

}  // namespace tinyserve
