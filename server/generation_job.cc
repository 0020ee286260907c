#include "server/generation_job.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <utility>

namespace tinyserve {

using protocol::ApiError;

protocol::ApiErrorOr<std::unique_ptr<GenerationJob>> GenerationJob::Submit(
    EngineCore* engine, const Tokenizer* tokenizer, AdmissionGate* gate,
    const std::string& response_id, std::vector<ChoiceSpec> specs,
    const protocol::SamplingFields& fields, double arrival_ts, const PrometheusMetrics* metrics) {
  const auto num = static_cast<int64_t>(specs.size());
  int64_t num_prompt_tokens = 0;
  for (const ChoiceSpec& spec : specs) num_prompt_tokens += std::ssize(spec.prompt_ids);
  std::string why;
  // Admitted whole: prompts that together hold more tokens than the prefill queue ever may would
  // be refused (503) on every try: a 400 instead.
  if (gate != nullptr && gate->limits().max_num_queued_tokens > 0 &&
      num_prompt_tokens > gate->limits().max_num_queued_tokens) {
    return ApiError::BadRequest(
        "The request's prompts hold " + std::to_string(num_prompt_tokens) +
            " tokens (counted once per choice), more than the server's prefill queue can ever "
            "hold (--max-num-queued-tokens " +
            std::to_string(gate->limits().max_num_queued_tokens) + ").",
        "prompt");
  }
  if (gate != nullptr) {
    const AdmissionGate::Outcome outcome = gate->TryAdmit(num, num_prompt_tokens, &why);
    if (outcome != AdmissionGate::Outcome::kAdmitted) {
      if (metrics != nullptr && outcome != AdmissionGate::Outcome::kDraining) {
        const AdmissionRejection reason = outcome == AdmissionGate::Outcome::kMaxNumQueuedReqs
                                              ? AdmissionRejection::kMaxNumQueuedReqs
                                              : AdmissionRejection::kMaxNumQueuedTokens;
        metrics->admission_rejections[static_cast<int>(reason)]->Increment();
      }
      return ApiError::Unavailable(why);
    }
  }
  std::unique_ptr<GenerationJob> job(new GenerationJob(engine, gate));
  std::vector<int64_t> job_specs_tokens;  // [num] each choice's prompt tokens
  for (const ChoiceSpec& spec : specs) job_specs_tokens.push_back(std::ssize(spec.prompt_ids));
  for (ChoiceSpec& spec : specs) {
    EngineRequest req;
    req.request_id = response_id + "-" + std::to_string(spec.index);
    req.prompt_token_ids = spec.prompt_ids;
    req.sampling = spec.params;
    req.grammar = spec.grammar;
    req.arrival_ts = arrival_ts;
    req.priority = fields.priority;
    req.params_n = fields.n;
    req.reports_params_n = spec.index % fields.n == 0;  // choice 0 of its prompt
    const int32_t last_prompt_token = spec.prompt_ids.back();
    auto choice = std::make_unique<Choice>(
        std::move(spec), req.request_id,
        protocol::ChoiceStream(*tokenizer, last_prompt_token, fields), arrival_ts);
    StatusOr<std::shared_ptr<RequestStream>> stream = engine->Submit(std::move(req));
    if (!stream.ok()) {
      // The ones submitted so far are aborted by the destructor; this one and the rest never
      // queued.
      if (gate != nullptr) {
        for (size_t rest = job->choices_.size(); rest < job_specs_tokens.size(); ++rest) {
          gate->LeavePrefill(job_specs_tokens[rest]);
          gate->FinishRequest();
        }
      }
      return ApiError::FromStatus(stream.status());
    }
    choice->stream = std::move(stream).value();
    job->choices_.push_back(std::move(choice));
  }
  job->num_unfinished_ = job->choices_.size();
  return job;
}

GenerationJob::~GenerationJob() {
  // Nothing may escape a destructor (std::terminate): EngineCore::Abort allocates an inbox item.
  // If that fails (out of memory), the requests run on to their own finish, their output unread.
  try {
    Abort();
  } catch (...) {
  }
  for (auto& c : choices_) {
    LeavePrefill(*c);
    LeaveGate(*c);
  }
  if (gate_ != nullptr) gate_->EndJob();
}

void GenerationJob::Abort() {
  for (auto& c : choices_) {
    if (!c->engine_done && !c->text.stopped_by_string()) engine_->Abort(c->request_id);
  }
}

bool GenerationJob::WaitUntilFinished(ConnectionWatch& watch, double poll_s) {
  std::vector<ChoiceUpdate> updates;
  while (!finished()) {
    if (watch.IsClientGone()) {
      Abort();
      return false;
    }
    updates.clear();
    Poll(poll_s, &updates);
  }
  return true;
}

bool GenerationJob::WaitForEngineFinish(double timeout_s) {
  using SteadyTime = std::chrono::steady_clock;
  const auto deadline = SteadyTime::now() + std::chrono::duration_cast<SteadyTime::duration>(
                                                std::chrono::duration<double>(timeout_s));
  std::vector<ChoiceUpdate> ignored;
  for (size_t i = 0; i < choices_.size(); ++i) {
    while (!choices_[i]->engine_done) {
      const double left = std::chrono::duration<double>(deadline - SteadyTime::now()).count();
      // With no time left, what the stream already holds is still taken.
      if (!Take(i, std::max(left, 0.0), &ignored) && left <= 0) return false;
    }
  }
  return true;
}

void GenerationJob::LeavePrefill(Choice& c) {
  if (c.left_prefill) return;
  c.left_prefill = true;
  if (gate_ != nullptr) gate_->LeavePrefill(std::ssize(c.spec.prompt_ids));
}

void GenerationJob::LeaveGate(Choice& c) {
  if (c.left_gate) return;
  c.left_gate = true;
  if (gate_ != nullptr) gate_->FinishRequest();
}

bool GenerationJob::Take(size_t i, double timeout_s, std::vector<ChoiceUpdate>* updates) {
  Choice& c = *choices_[i];
  // The stream swaps its pending buffers with this one's (cleared) buffers: after the first steps
  // neither side allocates per token.
  RequestOutput& out = take_buffer_;
  const bool got = timeout_s > 0 ? c.stream->Next(&out, timeout_s) : c.stream->TryNext(&out);
  if (!got) return false;
  c.metrics.Apply(out.events, out.token_ts, out.finished ? &out.counts : nullptr);
  if (out.finished || !out.token_ids.empty()) LeavePrefill(c);
  if (out.finished) {
    LeaveGate(c);
    c.engine_done = true;
    if (out.finish_reason == FinishReason::kError) c.error_message = out.error_message;
  }
  if (!out.token_ids.empty() || out.finished) {
    has_output_ = true;
    c.has_output = true;
  }
  c.prompt_logprobs.insert(c.prompt_logprobs.end(),
                           std::make_move_iterator(out.prompt_logprobs.begin()),
                           std::make_move_iterator(out.prompt_logprobs.end()));
  if (c.text.finished()) return true;  // after a stop string: only the engine's finish is left
  if (c.spec.echo_only) {
    // Nothing generated is shown: drop the token; an engine stop or length reads as length.
    out.token_ids.clear();
    out.token_ts.clear();
    out.logprobs.clear();
    out.stop_token_id.reset();
    if (out.finish_reason == FinishReason::kStop) out.finish_reason = FinishReason::kLength;
  }
  protocol::ChoiceDelta delta = c.text.Consume(out);
  if (!delta.logprobs.empty()) {
    if (c.logprobs.empty()) c.logprobs_prev_id = delta.logprobs_prev_id;
    c.logprobs.insert(c.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
  }
  if (c.text.stopped_by_string() && !c.engine_done) {
    engine_->Abort(c.request_id, FinishReason::kStop);
  }
  if (delta.finished) --num_unfinished_;
  if (delta.text.empty() && delta.num_tokens == 0 && !delta.finished) return true;
  updates->push_back({i, std::move(delta)});
  return true;
}

bool GenerationJob::Poll(double timeout_s, std::vector<ChoiceUpdate>* updates) {
  using SteadyTime = std::chrono::steady_clock;
  SteadyTime::time_point deadline;  // read the clock only if there is a wait
  if (timeout_s > 0) {
    deadline = SteadyTime::now() + std::chrono::duration_cast<SteadyTime::duration>(
                                       std::chrono::duration<double>(timeout_s));
  }
  const size_t before = updates->size();
  while (true) {
    bool got = false;
    size_t first_open = choices_.size();
    size_t num_open = 0;
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (choices_[i]->text.finished()) continue;
      ++num_open;
      if (first_open == choices_.size()) first_open = i;
      got = Take(i, 0.0, updates) || got;
    }
    if (got || num_open == 0 || timeout_s <= 0) break;
    const double left = std::chrono::duration<double>(deadline - SteadyTime::now()).count();
    if (left <= 0) break;
    // One open choice: block on its stream. Several: wait on the first briefly, then look at all.
    if (Take(first_open, num_open == 1 ? left : std::min(left, 0.001), updates)) break;
  }
  return updates->size() > before;
}

}  // namespace tinyserve
