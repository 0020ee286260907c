// POST /v1/chat/completions (OpenAiRoutes::HandleChat): the conversation rendered with the
// model's chat template, n choices, streamed (role chunk, content chunks, finish chunk) or not.
// With tools (and tool_choice "auto"), each choice's text goes through a ToolCallParser
// (protocol/tool_parser.h): calls become message.tool_calls, or tool-call deltas in a stream,
// and only the text outside them is content. See openai_routes.h.

#include <algorithm>
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/connection_watch.h"
#include "server/generation_job.h"
#include "server/openai_routes.h"
#include "server/protocol/chat_request.h"
#include "server/protocol/chat_template.h"
#include "server/protocol/logprobs_json.h"
#include "server/protocol/responses.h"
#include "server/protocol/stream_chunks.h"
#include "server/protocol/tool_grammar.h"
#include "server/protocol/tool_parser.h"
#include "server/request_metrics_json.h"
#include "server/sse_stream.h"

namespace tinyserve {

using protocol::ApiError;
using protocol::ApiErrorOr;

namespace {

class ChatSseStream final : public SseStream {
 public:
  ChatSseStream(std::unique_ptr<GenerationJob> job, protocol::ResponseMeta meta,
                int32_t num_prompt_tokens, const Tokenizer* tokenizer,
                const protocol::ChatRequest& request, bool with_metrics,
                std::optional<protocol::ToolParserKind> tool_parser)
      : SseStream(std::move(job)),
        tool_parser_(tool_parser),
        parallel_tool_calls_(request.tool_fields.parallel_tool_calls),
        with_metrics_(with_metrics),
        meta_(std::move(meta)),
        chunks_(meta_, protocol::StreamChunks::Kind::kChat),
        num_prompt_tokens_(num_prompt_tokens),
        tokenizer_(tokenizer),
        logprobs_(request.logprobs),
        include_usage_(request.sampling.include_usage()),
        continuous_usage_(request.sampling.stream_options &&
                          request.sampling.stream_options->continuous_usage_stats) {}

 protected:
  void OnStart(std::string* out) override {
    for (const auto& c : job().choices()) {
      chunks_.AppendChatRoleChunk(c->spec.index, out);
      if (tool_parser_) {
        parsers_.emplace_back(*tool_parser_, parallel_tool_calls_,
                              meta_.id + "/" + std::to_string(c->spec.index));
      }
    }
  }

  void OnUpdate(const ChoiceUpdate& u, std::string* out) override {
    const GenerationJob::Choice& c = *job().choices()[u.choice];
    const protocol::ChoiceDelta& d = u.delta;
    std::string text = d.text;
    std::vector<protocol::ChatToolCall> calls;
    protocol::ToolCallParser* parser = parsers_.empty() ? nullptr : &parsers_[u.choice];
    if (parser != nullptr) {
      protocol::ToolParseDelta parsed = parser->Feed(d.text);
      if (d.finished) {
        protocol::ToolParseDelta tail = parser->Finish();
        parsed.content += tail.content;
        for (auto& call : tail.calls) parsed.calls.push_back(std::move(call));
      }
      text = std::move(parsed.content);
      calls = std::move(parsed.calls);
    }
    if (!text.empty() || (logprobs_ && !d.logprobs.empty())) {
      nlohmann::ordered_json logprobs = nullptr;
      if (logprobs_ && !d.logprobs.empty()) {
        logprobs = protocol::ChatLogprobsJson(*tokenizer_, d.logprobs_prev_id, d.logprobs);
      }
      chunks_.AppendChatContentChunk(c.spec.index, text, logprobs, UsageOf(c), out);
    }
    const auto first_call =
        static_cast<int32_t>(parser == nullptr ? 0 : parser->calls().size() - calls.size());
    for (size_t k = 0; k < calls.size(); ++k) {
      const auto call_index = first_call + static_cast<int32_t>(k);
      *out += protocol::SseData(
          protocol::ChatToolCallChunkJson(meta_, c.spec.index, call_index, calls[k], true));
      *out += protocol::SseData(
          protocol::ChatToolCallChunkJson(meta_, c.spec.index, call_index, calls[k], false));
    }
    if (!d.finished) return;
    if (d.finish_reason == FinishReason::kError) {
      *out += protocol::SseData(
          ApiError::Make(500, "The request failed in the engine: " + c.error_message).ToJson());
    }
    if (parser != nullptr && !parser->calls().empty()) {
      *out += protocol::SseData(protocol::ChatFinishChunkJson(meta_, c.spec.index, d.finish_reason,
                                                              d.stop_reason, UsageOf(c), true));
      return;
    }
    chunks_.AppendChatFinishChunk(c.spec.index, d.finish_reason, d.stop_reason, UsageOf(c), out);
  }

  bool UsageWaitsForEngineFinish() const override { return include_usage_ && with_metrics_; }

  void OnFinish(std::string* out) override {
    if (!include_usage_) return;
    protocol::Usage usage{num_prompt_tokens_, 0};
    for (const auto& c : job().choices()) usage.completion_tokens += c->text.num_tokens();
    if (!with_metrics_) return chunks_.AppendUsageChunk(usage, out);
    nlohmann::ordered_json chunk = protocol::ChatUsageChunkJson(meta_, usage);
    chunk["metrics"] = JobMetricsJson(job());
    *out += protocol::SseData(chunk);
  }

 private:
  std::optional<protocol::Usage> UsageOf(const GenerationJob::Choice& c) const {
    if (!continuous_usage_) return std::nullopt;
    return protocol::Usage{num_prompt_tokens_, c.text.num_tokens()};
  }

  // Set iff the request's tools are parsed; then parsers_ has one parser per choice (OnStart).
  const std::optional<protocol::ToolParserKind> tool_parser_;
  const bool parallel_tool_calls_;
  std::vector<protocol::ToolCallParser> parsers_;
  const bool with_metrics_;  // --enable-per-request-metrics: the usage chunk carries `metrics`
  const protocol::ResponseMeta meta_;
  const protocol::StreamChunks chunks_;
  const int32_t num_prompt_tokens_;
  const Tokenizer* const tokenizer_;
  const bool logprobs_;
  const bool include_usage_;
  const bool continuous_usage_;
};

}  // namespace

void OpenAiRoutes::HandleChat(const HttpRequest& req, HttpResponse& res) {
  // Stamped by the transport (server/http_server.h): the wait before the handler counts in TTFT
  // and e2e.
  const double arrival_ts = req.arrival_ts;
  const Tokenizer& tok = *context_.tokenizer;
  ApiErrorOr<protocol::ChatRequest> parsed =
      protocol::ParseChatRequestBody(req.body, tok.vocab_size());
  if (!parsed.ok()) return SendError(res, parsed.error());
  protocol::ChatRequest& request = *parsed;
  const protocol::SamplingFields& fields = request.sampling;
  if (auto e = CheckModel(request.model)) return SendError(res, *e);
  if (auto e = CheckNumChoices(1, fields.n)) return SendError(res, *e);
  const protocol::ToolFields& tools = request.tool_fields;
  std::optional<protocol::ToolParserKind> tool_parser;
  if (tools.parses_tool_calls()) {
    tool_parser = context_.tool_call_parser.empty()
                      ? protocol::DefaultToolParserFor(context_.chat_template)
                      : protocol::ToolParserFromName(context_.tool_call_parser);
    if (!tool_parser) {
      return SendError(res, ApiError::Make(500, "unknown --tool-call-parser '" +
                                                    context_.tool_call_parser + "'"));
    }
  }
  if (tools.parses_tool_calls() &&
      (tools.tool_choice.kind == protocol::ToolChoice::Kind::kRequired ||
       tools.tool_choice.kind == protocol::ToolChoice::Kind::kFunction)) {
    // A forced call: decoded under the grammar of the parser's call syntax (tool_grammar.h).
    if (fields.structured) {
      return SendError(res, ApiError::BadRequest(
                                "tool_choice 'required' or a named function forces a tool call; "
                                "it cannot be combined with `" +
                                    fields.structured->param + "`",
                                "tool_choice"));
    }
    StatusOr<std::string> gbnf = protocol::ForcedToolCallGrammar(
        *tool_parser, tools.tools, tools.tool_choice, tools.parallel_tool_calls);
    if (!gbnf.ok()) return SendError(res, ApiError::FromStatus(gbnf.status(), "tools"));
    protocol::StructuredOutput forced;
    forced.spec.kind = structured::ConstraintKind::kGrammar;
    forced.spec.text = std::move(gbnf).value();
    forced.param = "tool_choice";
    request.sampling.structured = std::move(forced);
  }
  ApiErrorOr<std::shared_ptr<const structured::CompiledGrammar>> grammar =
      CompileStructuredOutput(fields);
  if (!grammar.ok()) return SendError(res, grammar.error());

  StatusOr<protocol::RenderedChat> rendered =
      protocol::RenderChat(context_.chat_template, request.messages, request.add_generation_prompt,
                           /*today=*/{}, tools.tools);
  if (!rendered.ok()) return SendError(res, ApiError::FromStatus(rendered.status(), "messages"));
  std::vector<int32_t> ids = protocol::EncodeChatPrompt(context_.chat_template, *rendered, tok);
  if (ids.empty()) {
    return SendError(res, ApiError::BadRequest("The rendered conversation is empty.", "messages"));
  }
  if (auto e = protocol::TruncatePromptTokens(fields, context_.max_model_len, &ids)) {
    return SendError(res, *e);
  }
  ApiErrorOr<SamplingParams> params =
      protocol::ToSamplingParams(fields, static_cast<int32_t>(ids.size()), context_.max_model_len);
  if (!params.ok()) return SendError(res, params.error());
  std::vector<ChoiceSpec> specs;
  for (int32_t j = 0; j < fields.n; ++j) {
    ChoiceSpec spec;
    spec.index = j;
    spec.prompt_ids = ids;
    spec.params = *params;
    spec.grammar = *grammar;
    if (fields.seed) spec.params.seed = *fields.seed + static_cast<uint64_t>(j);
    // One prompt: the first choice scores it, and only for a response that carries them (a
    // stream may ask for prompt_logprobs 0, as vLLM allows, but never sends them).
    if (j > 0 || fields.stream) spec.params.prompt_logprobs.reset();
    specs.push_back(std::move(spec));
  }
  if (auto e = CheckLogprobEntries(specs)) return SendError(res, *e);
  if (auto e = CheckServing()) return SendError(res, *e);

  protocol::ResponseMeta meta{protocol::NewRequestId("chatcmpl-"),
                              static_cast<int64_t>(std::time(nullptr)), context_.served_model_name};
  ApiErrorOr<std::unique_ptr<GenerationJob>> submitted =
      GenerationJob::Submit(context_.engine, &tok, &gate_, meta.id, std::move(specs), fields,
                            arrival_ts, context_.metrics);
  if (!submitted.ok()) return SendError(res, submitted.error());
  CountStructuredOutput(fields);
  std::unique_ptr<GenerationJob> job = std::move(submitted).value();
  ConnectionWatch watch = ConnectionWatch::ForRequest(req);
  const auto num_prompt_tokens = static_cast<int32_t>(ids.size());

  if (fields.stream) {
    SseStream::Attach(
        std::make_shared<ChatSseStream>(std::move(job), std::move(meta), num_prompt_tokens, &tok,
                                        request, context_.enable_per_request_metrics, tool_parser),
        res);
    return;
  }

  if (!job->WaitUntilFinished(watch, GenerationJob::kClientPollSeconds)) {
    return SendError(res, ApiError::Make(499, "The client closed the connection."));
  }
  std::vector<protocol::ChatChoice> choices;
  protocol::Usage usage{num_prompt_tokens, 0};
  for (const auto& c : job->choices()) {
    if (c->text.finish_reason() == FinishReason::kError) {
      return SendError(
          res, ApiError::Make(500, "The request failed in the engine: " + c->error_message));
    }
    protocol::ChatChoice choice;
    choice.index = c->spec.index;
    choice.content = c->text.text();
    if (tool_parser) {
      protocol::ToolParseDelta split =
          protocol::ParseToolCalls(*tool_parser, tools.parallel_tool_calls,
                                   meta.id + "/" + std::to_string(c->spec.index), choice.content);
      choice.content = std::move(split.content);
      choice.tool_calls = std::move(split.calls);
    }
    if (request.logprobs) {
      choice.logprobs = protocol::ChatLogprobsJson(tok, c->logprobs_prev_id, c->logprobs);
    }
    choice.finish_reason = c->text.finish_reason();
    choice.stop_reason = c->text.stop_reason();
    usage.completion_tokens += c->text.num_tokens();
    choices.push_back(std::move(choice));
  }
  nlohmann::ordered_json prompt_logprobs = nullptr;
  if (const GenerationJob::Choice& first = *job->choices().front();
      first.spec.params.prompt_logprobs) {
    prompt_logprobs = protocol::PromptLogprobsJson(tok, ids, first.prompt_logprobs);
  }
  nlohmann::ordered_json body = protocol::ChatResponseJson(meta, choices, usage, prompt_logprobs);
  if (context_.enable_per_request_metrics) {
    job->WaitForEngineFinish(GenerationJob::kEngineFinishSeconds);
    body["metrics"] = JobMetricsJson(*job);
  }
  res.status = 200;
  res.SetContent(protocol::DumpJson(body), "application/json");
}

}  // namespace tinyserve
