// ChoiceStream: one choice's way from the engine's token outputs to the text a client receives.
//
// It chains IncrementalDetokenizer (UTF-8-safe text) and StopMatcher (stop strings) token by
// token, and tracks what the response needs: the full text, the number of completion tokens, the
// logprobs of the tokens that count, and the finish. When a stop string is found, the tokens
// after the one that completed it are dropped (not counted, as vLLM), the choice finishes with
// finish_reason "stop" and stop_reason = the string, and stopped_by_string() tells the frontend to
// abort the engine request. When the engine finishes the request, the held-back text is released
// (the detokenizer's tail first, which can itself complete a stop string) and the engine's reason
// is kept: "stop" with stop_reason = the stop token id (or null for EOS), "length", "abort".
//
// Single-owner (one per choice); the Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request_stream.h"
#include "models/tokenizer/tokenizer.h"
#include "server/protocol/detokenizer.h"
#include "server/protocol/responses.h"
#include "server/protocol/sampling_fields.h"
#include "server/protocol/stop_matcher.h"

namespace tinyserve::protocol {

// What one engine delta adds to a choice.
struct ChoiceDelta {
  std::string text;                     // new text to send (may be empty)
  int32_t num_tokens = 0;               // new completion tokens that count
  std::vector<TokenLogprobs> logprobs;  // [num_tokens] if the engine sent logprobs, else empty
  int32_t logprobs_prev_id = -1;        // the token before logprobs[0] (for their token texts)
  bool finished = false;                // the choice is done (engine finish or stop string)
  FinishReason finish_reason = FinishReason::kNone;
  StopReason stop_reason;
};

class ChoiceStream {
 public:
  // `last_prompt_token` is the prompt's last id (context of the first piece). Uses
  // fields.stop, include_stop_str_in_output and skip_special_tokens.
  ChoiceStream(const Tokenizer& tokenizer, int32_t last_prompt_token, const SamplingFields& fields);

  // Consumes the next engine delta. After the choice finished, returns an empty delta.
  ChoiceDelta Consume(const RequestOutput& output);

  bool finished() const { return finished_; }
  // Returns true iff a stop string finished the choice (then abort the engine request).
  bool stopped_by_string() const { return stop_.stopped(); }
  const std::string& text() const { return text_; }  // everything sent so far
  int32_t num_tokens() const { return num_tokens_; }
  FinishReason finish_reason() const { return finish_reason_; }
  const StopReason& stop_reason() const { return stop_reason_; }

 private:
  void Finish(FinishReason reason, StopReason stop_reason, ChoiceDelta* delta);

  IncrementalDetokenizer detok_;
  StopMatcher stop_;
  int32_t last_token_;
  std::string text_;
  int32_t num_tokens_ = 0;
  bool finished_ = false;
  FinishReason finish_reason_ = FinishReason::kNone;
  StopReason stop_reason_;
};

}  // namespace tinyserve::protocol
