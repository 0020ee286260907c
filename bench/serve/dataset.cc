#include "bench/serve/dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace tinyserve::bench {
namespace {

// Common short English words; random text prompts are sequences of these.
constexpr const char* kWords[] = {
    "the",   "a",     "little", "girl",   "boy",  "dog",   "cat",   "saw",  "big",    "red",
    "ball",  "tree",  "park",   "happy",  "sad",  "day",   "sun",   "ran",  "jumped", "played",
    "with",  "her",   "his",    "friend", "mom",  "home",  "box",   "toy",  "bird",   "fish",
    "blue",  "green", "small",  "said",   "went", "to",    "and",   "in",   "on",     "under",
    "house", "car",   "water",  "cake",   "book", "smile", "fast",  "slow", "night",  "star",
    "moon",  "sky",   "flower", "garden", "door", "king",  "queen", "shy",  "brave",  "kind",
    "funny", "time",  "once",   "upon"};
constexpr int kNumWords = static_cast<int>(sizeof(kWords) / sizeof(kWords[0]));

int DrawLength(int len, double ratio, std::mt19937_64& rng) {
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1.0 - ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1.0 + ratio))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

int EstimateTokens(const std::string& text) {
  std::istringstream in(text);
  int words = 0;
  for (std::string w; in >> w;) ++words;
  return std::clamp(static_cast<int>(std::ceil(1.3 * words)), 1, 4096);
}

// The first user prompt and first assistant reply of one JSONL record; false if it has no prompt.
bool ParseRecord(const nlohmann::json& rec, std::string* prompt, std::string* reply,
                 int* output_len) {
  if (!rec.is_object()) return false;
  if (rec.contains("prompt") && rec["prompt"].is_string()) {
    *prompt = rec["prompt"].get<std::string>();
    if (rec.contains("output_len") && rec["output_len"].is_number_integer()) {
      *output_len = rec["output_len"].get<int>();
    }
    return !prompt->empty();
  }
  const nlohmann::json* turns = nullptr;
  if (rec.contains("conversations") && rec["conversations"].is_array()) {
    turns = &rec["conversations"];
  } else if (rec.contains("messages") && rec["messages"].is_array()) {
    turns = &rec["messages"];
  }
  if (turns == nullptr) return false;
  for (const nlohmann::json& t : *turns) {
    if (!t.is_object()) continue;
    const std::string who = t.contains("from") ? t.value("from", "") : t.value("role", "");
    const nlohmann::json& v = t.contains("value")     ? t["value"]
                              : t.contains("content") ? t["content"]
                                                      : t;
    if (!v.is_string()) continue;
    if (prompt->empty() && (who == "human" || who == "user")) {
      *prompt = v.get<std::string>();
    } else if (!prompt->empty() && (who == "gpt" || who == "assistant")) {
      *reply = v.get<std::string>();
      break;
    }
  }
  return !prompt->empty();
}

}  // namespace

StatusOr<std::vector<BenchPrompt>> MakeRandomDataset(const RandomDatasetOptions& o) {
  if (o.num_prompts < 1 || o.input_len < 1 || o.output_len < 1 || o.prefix_len < 0) {
    return InvalidArgument(
        "random dataset: --num-prompts, --random-input-len and "
        "--random-output-len must be >= 1 and --random-prefix-len >= 0");
  }
  if (!(o.range_ratio >= 0.0 && o.range_ratio < 1.0)) {
    return InvalidArgument("random dataset: --random-range-ratio must be in [0, 1)");
  }
  if (o.as_token_ids && o.vocab_size <= kFirstRandomTokenId + 1) {
    return InvalidArgument("random dataset: token-id prompts need --vocab-size (> 4)");
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(kFirstRandomTokenId,
                                               std::max(kFirstRandomTokenId + 1, o.vocab_size) - 1);
  std::uniform_int_distribution<int> word(0, kNumWords - 1);
  auto append = [&](BenchPrompt* p, int n) {
    for (int i = 0; i < n; ++i) {
      if (o.as_token_ids) {
        p->token_ids.push_back(token(rng));
      } else {
        if (!p->text.empty()) p->text.push_back(' ');
        p->text += kWords[word(rng)];
      }
    }
  };
  BenchPrompt prefix;
  append(&prefix, o.prefix_len);
  std::vector<BenchPrompt> prompts;
  prompts.reserve(static_cast<size_t>(o.num_prompts));
  for (int i = 0; i < o.num_prompts; ++i) {
    BenchPrompt p = prefix;
    const int in = DrawLength(o.input_len, o.range_ratio, rng);
    p.output_len = DrawLength(o.output_len, o.range_ratio, rng);
    append(&p, in);
    p.prompt_len = o.prefix_len + in;
    prompts.push_back(std::move(p));
  }
  return prompts;
}

StatusOr<std::vector<BenchPrompt>> LoadJsonlDataset(const std::string& path, int num_prompts,
                                                    int output_len) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read dataset " + path);
  std::vector<BenchPrompt> all;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json rec = nlohmann::json::parse(line, nullptr, false);
    if (rec.is_discarded()) {
      return InvalidArgument(path + ":" + std::to_string(line_no) + ": not a JSON object");
    }
    std::string prompt, reply;
    int len = 0;
    if (!ParseRecord(rec, &prompt, &reply, &len)) continue;
    BenchPrompt p;
    p.prompt_len = EstimateTokens(prompt);
    p.text = std::move(prompt);
    p.output_len = output_len > 0 ? output_len : len > 0 ? len : EstimateTokens(reply);
    all.push_back(std::move(p));
  }
  if (all.empty()) return InvalidArgument(path + ": no conversation with a user turn");
  std::vector<BenchPrompt> prompts;
  for (int i = 0; i < num_prompts; ++i) prompts.push_back(all[static_cast<size_t>(i) % all.size()]);
  return prompts;
}

}  // namespace tinyserve::bench
