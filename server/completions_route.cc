// POST /v1/completions (OpenAiRoutes::HandleCompletions): one choice per prompt x n, streamed or
// not. See openai_routes.h.

#include <algorithm>
#include <ctime>
#include <memory>
#include <utility>
#include <vector>

#include "base/utf8.h"
#include "server/connection_watch.h"
#include "server/generation_job.h"
#include "server/openai_routes.h"
#include "server/protocol/completion_request.h"
#include "server/protocol/logprobs_json.h"
#include "server/protocol/responses.h"
#include "server/protocol/stream_chunks.h"
#include "server/request_metrics_json.h"
#include "server/sse_stream.h"

namespace tinyserve {

using protocol::ApiError;
using protocol::ApiErrorOr;

namespace {

// The choice that scores `c`'s prompt (prompt logprobs, for echo or prompt_logprobs): the prompt's
// first choice. The job's choices are in prompt order, n per prompt.
const GenerationJob::Choice& ScorerOf(const GenerationJob& job, const GenerationJob::Choice& c,
                                      int32_t n) {
  return *job.choices()[static_cast<size_t>(c.spec.prompt_index) * static_cast<size_t>(n)];
}

struct PromptInfo {
  std::vector<int32_t> ids;
  std::string echo;  // the echoed prompt text ("" without echo)
};

class CompletionSseStream final : public SseStream {
 public:
  CompletionSseStream(std::unique_ptr<GenerationJob> job, protocol::ResponseMeta meta,
                      std::vector<PromptInfo> prompts, const Tokenizer* tokenizer,
                      const protocol::SamplingFields& fields, bool echo_logprobs, bool with_metrics)
      : SseStream(std::move(job)),
        with_metrics_(with_metrics),
        meta_(std::move(meta)),
        chunks_(meta_, protocol::StreamChunks::Kind::kCompletion),
        prompts_(std::move(prompts)),
        tokenizer_(tokenizer),
        include_usage_(fields.include_usage()),
        continuous_usage_(fields.stream_options && fields.stream_options->continuous_usage_stats),
        echo_logprobs_(echo_logprobs),
        n_(fields.n),
        text_offsets_(this->job().choices().size(), 0),
        echo_pending_(this->job().choices().size(), false),
        held_(this->job().choices().size()) {}

 protected:
  // The echo is the first chunk of its choice. With prompt logprobs it waits for them: it goes
  // out just before the choice's first update, once the prompt's scorer (ScorerOf) has had its
  // first output (its prompt logprobs all arrive before that); until then the choice's updates
  // are held.
  void OnStart(std::string* out) override {
    for (size_t i = 0; i < job().choices().size(); ++i) {
      const GenerationJob::Choice& c = *job().choices()[i];
      if (echo_logprobs_) {
        echo_pending_[i] = true;
      } else if (!prompts_[static_cast<size_t>(c.spec.prompt_index)].echo.empty()) {
        SendEcho(i, out);
      }
    }
  }

  void OnUpdate(const ChoiceUpdate& u, std::string* out) override {
    if (echo_pending_[u.choice]) {
      const GenerationJob::Choice& c = *job().choices()[u.choice];
      if (!ScorerOf(job(), c, n_).has_output) {
        held_[u.choice].push_back(u);
        return;
      }
      echo_pending_[u.choice] = false;
      SendEcho(u.choice, out);
    }
    Send(u, out);
    // The scorer's first output releases the choices of its prompt that were held.
    const auto first =
        static_cast<size_t>(job().choices()[u.choice]->spec.prompt_index) * static_cast<size_t>(n_);
    if (u.choice != first) return;
    for (size_t i = first; i < first + static_cast<size_t>(n_); ++i) {
      if (held_[i].empty()) continue;
      echo_pending_[i] = false;
      SendEcho(i, out);
      for (const ChoiceUpdate& h : held_[i]) Send(h, out);
      held_[i].clear();
    }
  }

  bool UsageWaitsForEngineFinish() const override { return include_usage_ && with_metrics_; }

  void OnFinish(std::string* out) override {
    if (!include_usage_) return;
    if (!with_metrics_) return chunks_.AppendUsageChunk(TotalUsage(), out);
    nlohmann::ordered_json chunk = protocol::CompletionUsageChunkJson(meta_, TotalUsage());
    chunk["metrics"] = JobMetricsJson(job());
    *out += protocol::SseData(chunk);
  }

 private:
  void Send(const ChoiceUpdate& u, std::string* out) {
    const GenerationJob::Choice& c = *job().choices()[u.choice];
    const protocol::ChoiceDelta& d = u.delta;
    const bool with_logprobs = c.spec.params.logprobs.has_value() && !d.logprobs.empty();
    if (d.text.empty() && !d.finished && !with_logprobs) return;  // held-back bytes only
    if (d.finished && d.finish_reason == FinishReason::kError) {
      *out += protocol::SseData(
          ApiError::Make(500, "The request failed in the engine: " + c.error_message).ToJson());
    }
    protocol::CompletionChoice choice;
    choice.index = c.spec.index;
    choice.text = d.text;
    logprobs_json_.clear();
    if (with_logprobs) {
      protocol::AppendCompletionLogprobsJson(*tokenizer_, d.logprobs_prev_id, d.logprobs,
                                             text_offsets_[u.choice], &text_offsets_[u.choice],
                                             &logprobs_json_);
    } else {
      text_offsets_[u.choice] += Utf8Length(d.text);
    }
    if (d.finished) {
      choice.finish_reason = d.finish_reason;
      choice.stop_reason = d.stop_reason;
    }
    chunks_.AppendCompletionChunk(choice, UsageOf(u.choice), out, logprobs_json_);
  }

  void SendEcho(size_t i, std::string* out) {
    const GenerationJob::Choice& c = *job().choices()[i];
    const std::string& echo = prompts_[static_cast<size_t>(c.spec.prompt_index)].echo;
    protocol::CompletionChoice choice;
    choice.index = c.spec.index;
    choice.text = echo;
    if (echo_logprobs_) {
      choice.logprobs = protocol::CompletionPromptLogprobsJson(
          *tokenizer_, c.spec.prompt_ids, ScorerOf(job(), c, n_).prompt_logprobs);
    }
    text_offsets_[i] = Utf8Length(echo);
    chunks_.AppendCompletionChunk(choice, UsageOf(i), out);
  }

  std::optional<protocol::Usage> UsageOf(size_t i) {
    if (!continuous_usage_) return std::nullopt;
    const GenerationJob::Choice& c = *job().choices()[i];
    return protocol::Usage{static_cast<int32_t>(c.spec.prompt_ids.size()), c.text.num_tokens()};
  }
  protocol::Usage TotalUsage() {
    protocol::Usage usage;
    for (const PromptInfo& p : prompts_) usage.prompt_tokens += static_cast<int32_t>(p.ids.size());
    for (const auto& c : job().choices()) usage.completion_tokens += c->text.num_tokens();
    return usage;
  }

  const bool with_metrics_;  // --enable-per-request-metrics: the usage chunk carries `metrics`
  const protocol::ResponseMeta meta_;
  const protocol::StreamChunks chunks_;
  const std::vector<PromptInfo> prompts_;
  const Tokenizer* const tokenizer_;
  const bool include_usage_;
  const bool continuous_usage_;
  const bool echo_logprobs_;  // echo with logprobs: the echo chunk carries the prompt's logprobs
  const int32_t n_;           // choices per prompt
  std::vector<size_t> text_offsets_;  // [num_choices] code points sent so far
  std::vector<bool> echo_pending_;    // [num_choices] the echo waits for the prompt logprobs
  std::vector<std::vector<ChoiceUpdate>> held_;  // [num_choices] updates before the echo
  std::string logprobs_json_;                    // OnUpdate's logprobs object, reused
};

}  // namespace

void OpenAiRoutes::HandleCompletions(const HttpRequest& req, HttpResponse& res) {
  // Stamped by the transport (server/http_server.h): the wait before the handler counts in TTFT
  // and e2e.
  const double arrival_ts = req.arrival_ts;
  const Tokenizer& tok = *context_.tokenizer;
  ApiErrorOr<protocol::CompletionRequest> parsed =
      protocol::ParseCompletionRequestBody(req.body, tok.vocab_size());
  if (!parsed.ok()) return SendError(res, parsed.error());
  const protocol::CompletionRequest& request = *parsed;
  const protocol::SamplingFields& fields = request.sampling;
  if (auto e = CheckModel(request.model)) return SendError(res, *e);
  if (auto e = CheckNumChoices(request.prompts.size(), fields.n)) return SendError(res, *e);
  ApiErrorOr<std::shared_ptr<const structured::CompiledGrammar>> grammar =
      CompileStructuredOutput(fields);
  if (!grammar.ok()) return SendError(res, grammar.error());

  const bool echo_logprobs = request.echo && fields.logprobs.has_value();
  std::vector<PromptInfo> prompts;
  std::vector<ChoiceSpec> specs;
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    PromptInfo info;
    info.ids = protocol::TokenizePrompt(request.prompts[p], tok);
    const size_t num_tokenized = info.ids.size();
    if (auto e = protocol::TruncatePromptTokens(fields, context_.max_model_len, &info.ids)) {
      return SendError(res, *e);
    }
    if (request.echo) {
      // A truncated prompt echoes what the model saw: the kept tokens' text.
      info.echo = info.ids.size() == num_tokenized ? protocol::EchoText(request.prompts[p], tok)
                                                   : protocol::EchoText({false, "", info.ids}, tok);
    }
    ApiErrorOr<SamplingParams> params = protocol::ToSamplingParams(
        fields, static_cast<int32_t>(info.ids.size()), context_.max_model_len);
    if (!params.ok()) return SendError(res, params.error());
    for (int32_t j = 0; j < fields.n; ++j) {
      ChoiceSpec spec;
      spec.index = protocol::ChoiceIndex(static_cast<int32_t>(p), fields.n, j);
      spec.prompt_index = static_cast<int32_t>(p);
      spec.prompt_ids = info.ids;
      spec.params = *params;
      spec.grammar = *grammar;
      // vLLM: echo with logprobs asks for the prompt's logprobs too (top-n = logprobs, unless
      // the request's prompt_logprobs, already in params, says otherwise). A stream sends them
      // only in its echo: without one it does not ask (prompt_logprobs 0 is allowed there).
      if (echo_logprobs && !spec.params.prompt_logprobs) {
        spec.params.prompt_logprobs = *fields.logprobs;
      }
      if (fields.stream && !echo_logprobs) spec.params.prompt_logprobs.reset();
      spec.echo_only = request.echo_only;
      if (fields.seed) spec.params.seed = *fields.seed + static_cast<uint64_t>(j);
      specs.push_back(std::move(spec));
    }
    prompts.push_back(std::move(info));
  }
  if (auto e = CheckLogprobEntries(specs)) return SendError(res, *e);  // as the response shows them
  // Each prompt is scored once, by its first choice (ScorerOf); its other choices show those.
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i % static_cast<size_t>(fields.n) != 0) specs[i].params.prompt_logprobs.reset();
  }
  if (auto e = CheckServing()) return SendError(res, *e);

  protocol::ResponseMeta meta{protocol::NewRequestId("cmpl-"),
                              static_cast<int64_t>(std::time(nullptr)), context_.served_model_name};
  ApiErrorOr<std::unique_ptr<GenerationJob>> submitted =
      GenerationJob::Submit(context_.engine, &tok, &gate_, meta.id, std::move(specs), fields,
                            arrival_ts, context_.metrics);
  if (!submitted.ok()) return SendError(res, submitted.error());
  CountStructuredOutput(fields);
  std::unique_ptr<GenerationJob> job = std::move(submitted).value();
  ConnectionWatch watch = ConnectionWatch::ForRequest(req);

  if (fields.stream) {
    SseStream::Attach(std::make_shared<CompletionSseStream>(
                          std::move(job), std::move(meta), std::move(prompts), &tok, fields,
                          echo_logprobs, context_.enable_per_request_metrics),
                      res);
    return;
  }

  if (!job->WaitUntilFinished(watch, GenerationJob::kClientPollSeconds)) {
    return SendError(res, ApiError::Make(499, "The client closed the connection."));
  }
  std::vector<protocol::CompletionChoice> choices;
  protocol::Usage usage;
  for (const PromptInfo& p : prompts) usage.prompt_tokens += static_cast<int32_t>(p.ids.size());
  for (const auto& c : job->choices()) {
    if (c->text.finish_reason() == FinishReason::kError) {
      return SendError(
          res, ApiError::Make(500, "The request failed in the engine: " + c->error_message));
    }
    const PromptInfo& prompt = prompts[static_cast<size_t>(c->spec.prompt_index)];
    const GenerationJob::Choice& scorer = ScorerOf(*job, *c, fields.n);
    protocol::CompletionChoice choice;
    choice.index = c->spec.index;
    choice.text = prompt.echo + c->text.text();
    if (c->spec.params.logprobs) {
      choice.logprobs = protocol::CompletionLogprobsJson(tok, c->logprobs_prev_id, c->logprobs,
                                                         Utf8Length(prompt.echo));
      if (echo_logprobs) {
        nlohmann::ordered_json all =
            protocol::CompletionPromptLogprobsJson(tok, c->spec.prompt_ids, scorer.prompt_logprobs);
        protocol::ConcatCompletionLogprobs(&all, choice.logprobs);
        choice.logprobs = std::move(all);
      }
    }
    if (scorer.spec.params.prompt_logprobs) {  // vLLM sends them whenever they were computed
      choice.prompt_logprobs =
          protocol::PromptLogprobsJson(tok, c->spec.prompt_ids, scorer.prompt_logprobs);
    }
    choice.finish_reason = c->text.finish_reason();
    choice.stop_reason = c->text.stop_reason();
    usage.completion_tokens += c->text.num_tokens();
    choices.push_back(std::move(choice));
  }
  std::sort(choices.begin(), choices.end(),
            [](const auto& a, const auto& b) { return a.index < b.index; });
  nlohmann::ordered_json body = protocol::CompletionResponseJson(meta, choices, usage);
  if (context_.enable_per_request_metrics) {
    job->WaitForEngineFinish(GenerationJob::kEngineFinishSeconds);
    body["metrics"] = JobMetricsJson(*job);
  }
  res.status = 200;
  res.SetContent(protocol::DumpJson(body), "application/json");
}

}  // namespace tinyserve
