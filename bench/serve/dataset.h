// Datasets for `tinyserve bench serve`: the prompts a benchmark sends, built up front and seeded.
//
// random: prompts of --random-input-len tokens (lengths uniform in [len*(1-r), len*(1+r)], as
// vLLM's
//   `--random-range-ratio`), after a shared prefix of --random-prefix-len tokens, each asking for
//   an output length drawn the same way. As token ids (needs the vocabulary size; ids uniform in
//   [kFirstRandomTokenId, vocab_size)), or as text: one word of a fixed English word list per
//   "token", so no model or tokenizer is needed; the server's usage reports the real token count.
// jsonl: ShareGPT-style conversations, one JSON object per line,
//   {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}
//   (also "messages" with "role"/"content"), or {"prompt": ..., "output_len": N}. The prompt is the
//   first user turn; the output length is --jsonl-output-len if given, else the first assistant
//   reply's length estimated as ceil(1.3 * words) (no tokenizer here), clamped to [1, 4096].
//   Conversations without a user turn are skipped; a line that is not JSON is an error naming the
//   file and line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tinyserve::bench {

inline constexpr int32_t kFirstRandomTokenId = 3;  // skip <unk>, <s>, </s> in Llama vocabularies

struct BenchPrompt {
  std::string text;                // the prompt as text (empty when token ids are sent)
  std::vector<int32_t> token_ids;  // the prompt as token ids (empty when text is sent)
  int32_t prompt_len = 0;          // tokens (ids) or words (text; the server's usage is exact)
  int32_t output_len = 0;          // max_tokens to ask for
};

struct RandomDatasetOptions {
  int num_prompts = 1000;
  int input_len = 1024;
  int output_len = 128;
  double range_ratio = 0.0;  // in [0, 1)
  int prefix_len = 0;
  bool as_token_ids = false;  // REQUIRES vocab_size > kFirstRandomTokenId when true
  int32_t vocab_size = 0;
  uint64_t seed = 0;
};

// Returns InvalidArgument on bad options (lengths < 1, ratio outside [0, 1), token ids without a
// vocabulary size).
StatusOr<std::vector<BenchPrompt>> MakeRandomDataset(const RandomDatasetOptions& options);

// Reads `num_prompts` prompts from a ShareGPT-style JSONL file (see above), in file order, starting
// over at the top when the file holds fewer.
// `output_len` > 0 overrides every prompt's output length. NotFound if the file cannot be read,
// InvalidArgument (with file:line) on a malformed line or when no prompt was found.
StatusOr<std::vector<BenchPrompt>> LoadJsonlDataset(const std::string& path, int num_prompts,
                                                    int output_len);

}  // namespace tinyserve::bench
