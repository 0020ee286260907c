// OpenAiRoutes: the OpenAI-compatible API of DESIGN §6, as routes of an HttpRouter.
//
//   POST /v1/completions        completions (every prompt form, n, echo, logprobs, stop, stream);
//                               echo + logprobs: logprobs of the prompt tokens first (vLLM), in
//                               the echo chunk when streaming (sent once they have all arrived)
//   POST /v1/chat/completions   chat, prompt from the model's chat template
//   GET  /v1/models             vLLM's model list (one model: the served name)
//   GET  /version               {"version": ...}
//   POST /tokenize              {prompt | messages, add_special_tokens} -> {count, max_model_len,
//                               tokens}
//   POST /detokenize            {tokens} -> {prompt}
//   POST /reset_prefix_cache    vLLM's: drops the prefix cache
//   (EngineCore::RequestPrefixCacheReset)
//                               -> 200, or 409 while requests hold KV blocks;
//                               ?reset_running_requests=true preempts them first
// Other methods on these paths get 405. Bodies are validated by server/protocol/ before anything
// is queued; errors are vLLM's JSON (protocol::ApiError). A `model` that is not the served name
// gets 404 model_not_found. With an API key, every /v1/* request needs `Authorization: Bearer
// KEY` (401 otherwise, compared in constant time; HttpServer asks CheckAuthorization before the
// body is read, with the other head checks of server/request_guard.h), and so does
// /reset_prefix_cache (vLLM serves it, unauthenticated, only with VLLM_SERVER_DEV_MODE=1; here it
// is always served, so it is guarded); /health, /metrics, /version, /tokenize and /detokenize
// stay open, as in vLLM. With max_queue_len (--max-num-queued-reqs) > 0,
// a request that would make more than that many engine requests in flight gets 503 at once (a
// request whose n alone is over the limit gets 400: it could never be admitted); likewise with
// max_num_queued_tokens > 0 for the prompt tokens waiting for their first token (AdmissionGate);
// refusals are counted in vllm:admission_rejections_total{reason}. A stopped or dead engine gives
// 503. With enable_per_request_metrics, a response for one prompt and n = 1 carries the request's
// `metrics` object (metrics/request_metrics.h; a stream: in its final usage chunk, which needs
// stream_options.include_usage), and `"metrics": null` otherwise (vLLM). Requests
// over the amplification caps (max_choices_per_request, max_logprobs_per_request) get 400 naming
// the cap. Structured outputs (response_format, structured_outputs, guided_*: server/protocol/
// structured_fields.h) are compiled, before anything is queued, through one GrammarCache against
// the Vocabulary built at construction from the tokenizer and the engine's EOS ids (a compile
// error is a 400 naming the field); each accepted constrained request is counted in
// tinyserve_structured_output_requests_total{kind}.
//
// Streams are SSE (server/sse_stream.h), an HttpBodyStream the transport writes as the engine
// produces tokens; a client that goes away has its engine requests aborted when a write to it
// fails (within a ping interval, 0.1 s), or, without streaming, within ~20 ms
// (server/connection_watch.h).
//
// Ownership: the context's pointers are borrowed and must outlive the routes and the server they
// are registered on. Handlers run on the server's worker threads; the object is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "metrics/prometheus_metrics.h"
#include "models/tokenizer/tokenizer.h"
#include "server/admission_gate.h"
#include "server/http_message.h"
#include "server/http_router.h"
#include "server/protocol/api_error.h"
#include "server/protocol/sampling_fields.h"
#include "structured/grammar.h"

namespace tinyserve {

struct ChoiceSpec;

struct OpenAiContext {
  EngineCore* engine = nullptr;          // null: generation routes answer 503
  const Tokenizer* tokenizer = nullptr;  // REQUIRES: non-null
  const Clock* clock = nullptr;          // the engine's clock (arrival_ts); REQUIRES: non-null
  std::string served_model_name;
  std::string model_root;               // /v1/models "root" (the model path); default the name
  int32_t max_model_len = 0;            // REQUIRES: > 0 (EngineCore::max_model_len())
  std::string chat_template = "plain";  // protocol::RenderChatTemplate name
  // --tool-call-parser (protocol::KnownToolParsers()); "": DefaultToolParserFor(chat_template).
  std::string tool_call_parser;
  std::string api_key;                // empty: no authentication
  int64_t max_queue_len = 0;          // --max-num-queued-reqs; 0: unlimited
  int64_t max_num_queued_tokens = 0;  // --max-num-queued-tokens; 0: unlimited
  // Where admission refusals are counted (vllm:admission_rejections_total); may be null.
  const PrometheusMetrics* metrics = nullptr;
  bool enable_per_request_metrics = false;  // --enable-per-request-metrics
  // Amplification caps (400 naming the flag): choices per request (prompts x n), and logprob
  // entries a response may carry (each scored token with its top-k: (1 + k) per token, over the
  // prompt tokens of prompt_logprobs / echo and up to max_tokens generated ones, of every choice).
  // 0: unlimited.
  int32_t max_choices_per_request = 128;
  int64_t max_logprobs_per_request = 250'000;
  std::string version = "0.1.0";
  std::function<bool()> is_healthy;  // null: healthy while the engine exists
};

class OpenAiRoutes {
 public:
  explicit OpenAiRoutes(OpenAiContext context);

  // Adds the routes to `router`. REQUIRES: this object outlives it.
  void Register(HttpRouter& router);
  // The API-key check, for the server's head checks (before the body is read): the 401
  // for a /v1 request without the key, else nullopt. The key is compared, in constant time, with
  // the whole value of the one Authorization header, as sent (not decoded, not cut at a NUL).
  std::optional<protocol::ApiError> CheckAuthorization(const HttpRequest& req) const;
  // Returns true iff `method` `path` is a route that parses a JSON body.
  static bool TakesJsonBody(const std::string& method, const std::string& path);

  // The engine requests in flight, as counted for --max-num-queued-reqs.
  int64_t num_waiting() const { return gate_.num_queued_reqs(); }
  // The generation requests (HTTP exchanges) in flight.
  int64_t num_in_flight() const { return gate_.num_jobs(); }
  // From now on new generation requests get 503 (shutdown); the ones in flight go on.
  void Drain() { gate_.Drain(); }

  // Sets `res` to the error's JSON and status.
  static void SendError(HttpResponse& res, const protocol::ApiError& error);

 private:
  // 404 unless `model` is absent or the served name.
  std::optional<protocol::ApiError> CheckModel(const std::optional<std::string>& model) const;
  // 503 when the engine is missing or dead.
  std::optional<protocol::ApiError> CheckServing() const;
  // 400 when `num_prompts` x `n` is over --max-choices-per-request, or when `n` alone could never
  // fit in the queue (--max-num-queued-reqs).
  std::optional<protocol::ApiError> CheckNumChoices(size_t num_prompts, int32_t n) const;
  // 400 when the choices could carry more logprob entries than --max-logprobs-per-request.
  std::optional<protocol::ApiError> CheckLogprobEntries(const std::vector<ChoiceSpec>& specs) const;
  // The compiled grammar of the request's structured output (null when it has none), or the 400
  // naming its field.
  protocol::ApiErrorOr<std::shared_ptr<const structured::CompiledGrammar>> CompileStructuredOutput(
      const protocol::SamplingFields& fields);
  // Counts an accepted constrained request in tinyserve_structured_output_requests_total.
  void CountStructuredOutput(const protocol::SamplingFields& fields) const;

  void HandleCompletions(const HttpRequest& req, HttpResponse& res);
  void HandleChat(const HttpRequest& req, HttpResponse& res);
  void HandleModels(const HttpRequest& req, HttpResponse& res) const;
  void HandleVersion(const HttpRequest& req, HttpResponse& res) const;
  void HandleTokenize(const HttpRequest& req, HttpResponse& res) const;
  void HandleDetokenize(const HttpRequest& req, HttpResponse& res) const;
  void HandleResetPrefixCache(const HttpRequest& req, HttpResponse& res) const;

  const OpenAiContext context_;
  const int64_t created_;  // Unix seconds at start (the model's "created")
  AdmissionGate gate_;
  // Structured outputs: the vocabulary every grammar is compiled for (the engine's vocab_size),
  // and the compiled grammars (thread-safe).
  std::shared_ptr<const structured::Vocabulary> structured_vocabulary_;
  structured::GrammarCache grammar_cache_;
};

}  // namespace tinyserve
