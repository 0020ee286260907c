#include "server/protocol/choice_stream.h"

#include <utility>

namespace tinyserve::protocol {

ChoiceStream::ChoiceStream(const Tokenizer& tokenizer, int32_t last_prompt_token,
                           const SamplingFields& fields)
    : detok_(tokenizer, last_prompt_token, fields.skip_special_tokens),
      stop_(fields.stop, fields.include_stop_str_in_output),
      last_token_(last_prompt_token) {}

ChoiceDelta ChoiceStream::Consume(const RequestOutput& output) {
  ChoiceDelta delta;
  if (finished_) return delta;
  delta.logprobs_prev_id = last_token_;
  const bool has_logprobs = output.logprobs.size() == output.token_ids.size();
  for (size_t i = 0; i < output.token_ids.size(); ++i) {
    const int32_t id = output.token_ids[i];
    delta.text += stop_.Feed(detok_.Add(id));
    ++delta.num_tokens;
    if (has_logprobs) delta.logprobs.push_back(output.logprobs[i]);
    last_token_ = id;
    if (stop_.stopped()) {
      Finish(FinishReason::kStop, stop_.matched(), &delta);
      text_ += delta.text;
      num_tokens_ += delta.num_tokens;
      return delta;
    }
  }
  num_tokens_ += delta.num_tokens;
  if (output.finished) {
    delta.text += stop_.Feed(detok_.Flush());
    if (stop_.stopped()) {
      Finish(FinishReason::kStop, stop_.matched(), &delta);
    } else {
      delta.text += stop_.Flush();
      StopReason reason;
      if (output.stop_token_id) reason = *output.stop_token_id;
      Finish(output.finish_reason, std::move(reason), &delta);
    }
  }
  text_ += delta.text;
  return delta;
}

void ChoiceStream::Finish(FinishReason reason, StopReason stop_reason, ChoiceDelta* delta) {
  finished_ = true;
  finish_reason_ = reason;
  stop_reason_ = std::move(stop_reason);
  delta->finished = true;
  delta->finish_reason = finish_reason_;
  delta->stop_reason = stop_reason_;
}

}  // namespace tinyserve::protocol
