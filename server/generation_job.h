// GenerationJob: the engine side of one /v1/completions or /v1/chat/completions request. It
// submits one engine request per choice (ids "<response id>-<choice index>"), pumps their
// RequestStreams through one protocol::ChoiceStream each (UTF-8-safe text, stop strings), and
// hands the handler each choice's new text as it comes.
//
// - Admission: the AdmissionGate check (--max-num-queued-reqs, --max-num-queued-tokens; refused
//   while shutting down) for all choices at once, then Submit() for each; if any submit fails the
//   ones already submitted are aborted. Nothing is queued for a request that gets an error. A
//   refusal by a limit is counted in vllm:admission_rejections_total{reason} (once per job).
// - Each choice keeps a RequestMetricsTracker of its engine request (the per-request `metrics`
//   object of --enable-per-request-metrics), fed with every delta of its stream.
// - A stop string found in a choice's text finishes the choice at once and finishes its engine
//   request with reason stop (EngineCore::Abort(id, kStop)); its blocks are freed.
// - Abort() (the client went away) and the destructor finish every engine request whose finish
//   has not arrived with reason abort, so no request outlives its HTTP exchange.
//
// Single-owner: one handler thread at a time. The engine, tokenizer and gate must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/token_logprobs.h"
#include "engine/engine_core.h"
#include "metrics/prometheus_metrics.h"
#include "metrics/request_metrics.h"
#include "models/tokenizer/tokenizer.h"
#include "server/admission_gate.h"
#include "server/connection_watch.h"
#include "server/protocol/api_error.h"
#include "server/protocol/choice_stream.h"
#include "server/protocol/sampling_fields.h"

namespace tinyserve {

// One choice to generate.
struct ChoiceSpec {
  int32_t index = 0;                // the choice index of the response
  int32_t prompt_index = 0;         // which prompt it continues
  std::vector<int32_t> prompt_ids;  // [num_prompt_tokens], non-empty
  SamplingParams params;  // params.prompt_logprobs: collect the prompt logprobs (the request's
                          // prompt_logprobs, or echo + logprobs)
  // Echo with max_tokens 0: the engine's (one) token is dropped; the choice finishes with reason
  // length and no text or completion tokens (an error or abort still comes through).
  bool echo_only = false;
  // Structured outputs: the grammar the choice's output follows, or null.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
};

// What one Poll() brought for one choice.
struct ChoiceUpdate {
  size_t choice = 0;  // position in the job's choices (not the response index)
  protocol::ChoiceDelta delta;
};

class GenerationJob {
 public:
  // The state of one choice, readable at any time.
  struct Choice {
    Choice(ChoiceSpec spec_in, std::string request_id_in, protocol::ChoiceStream text_in,
           double arrival_ts)
        : spec(std::move(spec_in)),
          request_id(std::move(request_id_in)),
          text(std::move(text_in)),
          metrics(arrival_ts) {}

    ChoiceSpec spec;
    std::string request_id;
    std::shared_ptr<RequestStream> stream;
    protocol::ChoiceStream text;
    std::vector<TokenLogprobs> logprobs;  // of the counted tokens, if asked
    // Of prompt tokens 1.. (spec.params.prompt_logprobs); complete before the first token (a
    // request that fails or is aborted during its prefill may finish with only part of them).
    std::vector<TokenLogprobs> prompt_logprobs;
    int32_t logprobs_prev_id = -1;  // the token before logprobs[0]
    std::string error_message;      // finish_reason error
    bool engine_done = false;       // the engine's finish arrived
    bool left_prefill = false;      // the gate was told its first token (or finish) came
    bool left_gate = false;         // the gate was told it finished
    RequestMetricsTracker metrics;  // its timeline, from every delta of its stream
    // The engine sent a token or the finish: the prompt logprobs are complete (they come first).
    bool has_output = false;
  };

  // Submits every choice. `fields` gives the stop strings and detokenizer options; `gate` and
  // `metrics` (where refusals are counted) may be null. Errors: 503 when the gate refuses or the
  // engine is stopped, 400 if the engine rejects a request.
  static protocol::ApiErrorOr<std::unique_ptr<GenerationJob>> Submit(
      EngineCore* engine, const Tokenizer* tokenizer, AdmissionGate* gate,
      const std::string& response_id, std::vector<ChoiceSpec> specs,
      const protocol::SamplingFields& fields, double arrival_ts,
      const PrometheusMetrics* metrics = nullptr);

  ~GenerationJob();
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  // Waits up to `timeout_s` seconds for output of any unfinished choice and appends what came
  // to *updates (only choices with new text, tokens or a finish). Returns true iff any came.
  bool Poll(double timeout_s, std::vector<ChoiceUpdate>* updates);
  // Returns true iff every choice has finished.
  bool finished() const { return num_unfinished_ == 0; }
  // Returns true iff any choice has produced a token (or finished).
  bool has_output() const { return has_output_; }
  // Finishes every unfinished engine request with reason abort.
  void Abort();
  // For a non-streaming response: polls (`poll_s` at a time) until every choice has finished.
  // Returns false, after Abort(), iff `watch` saw the client go away first
  // (ConnectionWatch::IsClientGone: a half-closed client is still answered).
  bool WaitUntilFinished(ConnectionWatch& watch, double poll_s);
  // The poll_s of the routes: how often a non-streaming handler looks at its client.
  static constexpr double kClientPollSeconds = 0.02;
  // After finished(): waits up to `timeout_s` (0: takes only what has arrived) for the engine's
  // finish of every choice that a stop string ended (it follows within a step), so its metrics
  // tracker is complete. Returns true iff every choice's engine finish has arrived.
  bool WaitForEngineFinish(double timeout_s);
  // The timeout_s of every response with per-request metrics (the routes and SseStream's usage
  // chunk).
  static constexpr double kEngineFinishSeconds = 1.0;

  const std::vector<std::unique_ptr<Choice>>& choices() const { return choices_; }

 private:
  GenerationJob(EngineCore* engine, AdmissionGate* gate) : engine_(engine), gate_(gate) {}
  bool Take(size_t i, double timeout_s, std::vector<ChoiceUpdate>* updates);
  void LeavePrefill(Choice& c);
  void LeaveGate(Choice& c);

  EngineCore* const engine_;
  AdmissionGate* const gate_;
  std::vector<std::unique_ptr<Choice>> choices_;
  size_t num_unfinished_ = 0;
  bool has_output_ = false;
  RequestOutput take_buffer_;  // Take()'s output, reused
};

}  // namespace tinyserve
