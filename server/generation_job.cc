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
    const protocol::SamplingFields& fields, double arrival_ts) {
  const auto num = static_cast<int64_t>(specs.size());
  std::string why;
  if (gate != nullptr && !gate->TryAdmit(num, &why)) return ApiError::Unavailable(why);
  std::unique_ptr<GenerationJob> job(new GenerationJob(engine, gate));
  for (ChoiceSpec& spec : specs) {
    EngineRequest req;
    req.request_id = response_id + "-" + std::to_string(spec.index);
    req.prompt_token_ids = spec.prompt_ids;
    req.sampling = spec.params;
    req.arrival_ts = arrival_ts;
    req.priority = fields.priority;
    req.params_n = fields.n;
    req.reports_params_n = spec.index % fields.n == 0;  // choice 0 of its prompt
    const int32_t last_prompt_token = spec.prompt_ids.back();
    auto choice =
        std::make_unique<Choice>(std::move(spec), req.request_id,
                                 protocol::ChoiceStream(*tokenizer, last_prompt_token, fields));
    StatusOr<std::shared_ptr<RequestStream>> stream = engine->Submit(std::move(req));
    if (!stream.ok()) {
      // The ones submitted so far are aborted by the destructor; this one and the rest never
      // queued.
      for (auto rest = static_cast<int64_t>(job->choices_.size()); rest < num; ++rest) {
        if (gate != nullptr) gate->LeaveWaiting();
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
  for (auto& c : choices_) LeaveWaiting(*c);
  if (gate_ != nullptr) gate_->EndJob();
}

void GenerationJob::Abort() {
  for (auto& c : choices_) {
    if (!c->engine_done && !c->text.stopped_by_string()) engine_->Abort(c->request_id);
  }
}

bool GenerationJob::WaitUntilFinished(const ConnectionWatch& watch, double poll_s) {
  std::vector<ChoiceUpdate> updates;
  while (!finished()) {
    if (watch.IsPeerClosed()) {
      Abort();
      return false;
    }
    updates.clear();
    Poll(poll_s, &updates);
  }
  return true;
}

void GenerationJob::LeaveWaiting(Choice& c) {
  if (c.left_waiting) return;
  c.left_waiting = true;
  if (gate_ != nullptr) gate_->LeaveWaiting();
}

bool GenerationJob::Take(size_t i, double timeout_s, std::vector<ChoiceUpdate>* updates) {
  Choice& c = *choices_[i];
  // The stream swaps its pending buffers with this one's (cleared) buffers: after the first steps
  // neither side allocates per token.
  RequestOutput& out = take_buffer_;
  const bool got = timeout_s > 0 ? c.stream->Next(&out, timeout_s) : c.stream->TryNext(&out);
  if (!got) return false;
  if (!c.left_waiting) {
    const bool scheduled =
        out.finished || !out.token_ids.empty() ||
        std::any_of(out.events.begin(), out.events.end(),
                    [](const RequestEvent& e) { return e.type == EventType::kScheduled; });
    if (scheduled) LeaveWaiting(c);
  }
  if (out.finished) {
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
