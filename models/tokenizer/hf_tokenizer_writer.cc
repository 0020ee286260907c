// Writers of Hugging Face tokenizer files: from a llama2.c tokenizer, and synthetic byte-level
// vocabularies of a given size for generated model directories.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/tokenizer/byte_level_bpe.h"
#include "models/tokenizer/hf_tokenizer.h"
#include "models/tokenizer/llama2c_tokenizer.h"

namespace tinyserve {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr const char* kMetaspace = "\xE2\x96\x81";  // U+2581

Status WriteJson(const std::filesystem::path& path, const OrderedJson& json) {
  std::string text;
  try {
    text = json.dump(2);
  } catch (const OrderedJson::exception& e) {
    return InvalidArgument(path.string() + ": cannot write: " + e.what());
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text << "\n";
  out.close();
  if (!out) return Internal(path.string() + ": cannot write the file");
  return Status::Ok();
}

// Appends `key` to a JSON object without ordered_json's linear search for an existing key.
// REQUIRES: `key` is not in `object` yet.
void AppendKey(OrderedJson& object, std::string key, int32_t id) {
  static_cast<OrderedJson::object_t::Container&>(object.get_ref<OrderedJson::object_t&>())
      .emplace_back(std::move(key), id);
}

Status MakeDir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return Internal(dir + ": cannot create the directory: " + error.message());
  return Status::Ok();
}

OrderedJson AddedTokenJson(int32_t id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// A post_processor that prepends `bos` (HF's TemplateProcessing).
OrderedJson BosTemplate(const std::string& bos, int32_t bos_id) {
  return {{"type", "TemplateProcessing"},
          {"single", OrderedJson::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                                         {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
          {"pair", OrderedJson::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                                       {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                       {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                                       {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
          {"special_tokens",
           {{bos,
             {{"id", bos},
              {"ids", OrderedJson::array({bos_id})},
              {"tokens", OrderedJson::array({bos})}}}}}};
}

std::string ReplaceSpaces(const std::string& piece) {
  std::string out;
  for (char c : piece) {
    if (c == ' ') {
      out += kMetaspace;
    } else {
      out += c;
    }
  }
  return out;
}

// --- Chat templates as the published tokenizer_config.json files write them (Jinja). ---

constexpr const char* kZephyrTemplate =
    "{% for message in messages %}\n"
    "{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n"
    "{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n"
    "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n"
    "{{ '<|assistant|>' }}\n"
    "{% endif %}\n"
    "{% endfor %}";

constexpr const char* kChatmlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

constexpr const char* kQwen25Template =
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\") %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' "
    "}}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

constexpr const char* kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

// The pre-tokenizer regexes of Llama-3 and Qwen2's tokenizer.json.
constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct StyleInfo {
  // Named special tokens at fixed ids; every id from `reserved_from` to vocab_size - 1 that has
  // no name becomes "<|reserved_special_token_K|>" (K counting from 0). reserved_from < 0: none.
  std::vector<std::pair<int32_t, std::string>> named;
  int32_t reserved_from = -1;
  std::string bos;  // "" for none
  std::string eos;
  bool add_bos = false;
  const char* chat_template = nullptr;
};

StyleInfo Style(HfTokenizerStyle style) {
  switch (style) {
    case HfTokenizerStyle::kLlama3:
      return {{{128000, "<|begin_of_text|>"},
               {128001, "<|end_of_text|>"},
               {128006, "<|start_header_id|>"},
               {128007, "<|end_header_id|>"},
               {128009, "<|eot_id|>"}},
              128000,
              "<|begin_of_text|>",
              "<|eot_id|>",
              true,
              kLlama3Template};
    case HfTokenizerStyle::kQwen2:
      return {{{151643, "<|endoftext|>"}, {151644, "<|im_start|>"}, {151645, "<|im_end|>"}},
              151643,
              "",
              "<|im_end|>",
              false,
              kQwen25Template};
    case HfTokenizerStyle::kSmolLM:
      return {{{0, "<|endoftext|>"}, {1, "<|im_start|>"}, {2, "<|im_end|>"}},
              -1,
              "<|im_start|>",
              "<|im_end|>",
              false,
              kChatmlTemplate};
    case HfTokenizerStyle::kTinyLlama:
      return {{{0, "<unk>"}, {1, "<s>"}, {2, "</s>"}}, -1, "<s>", "</s>", true, kZephyrTemplate};
  }
  return {};
}

// Letter n-grams as merges, shortest first: "Ġa".."zz", then 3-grams, ... Each n-gram's
// prefix is an (n-1)-gram made before it, so every merge's parts are tokens.
std::vector<std::pair<std::string, std::string>> SyntheticMerges(size_t count) {
  std::vector<std::string> first = {Gpt2ByteToUnicode()[' ']};
  for (char c = 'a'; c <= 'z'; ++c) first.emplace_back(1, c);
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> level = first;  // the (n-1)-grams
  while (merges.size() < count) {
    std::vector<std::string> next;
    for (const std::string& prefix : level) {
      for (char c = 'a'; c <= 'z' && merges.size() < count; ++c) {
        merges.emplace_back(prefix, std::string(1, c));
        next.push_back(prefix + c);
      }
    }
    level = std::move(next);
  }
  return merges;
}

OrderedJson ByteLevelStep(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

OrderedJson SplitStep(const char* regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

OrderedJson Merges(const std::vector<std::pair<std::string, std::string>>& merges) {
  OrderedJson out = OrderedJson::array();
  for (const auto& [a, b] : merges) out.push_back(a + " " + b);
  return out;
}

Status WriteConfigs(const std::string& dir, const std::string& bos, const std::string& eos,
                    const std::string& unk, bool add_bos, const char* chat_template,
                    const std::string& tokenizer_class) {
  namespace fs = std::filesystem;
  OrderedJson config = {{"add_bos_token", add_bos}, {"add_eos_token", false}};
  config["bos_token"] = bos.empty() ? OrderedJson() : OrderedJson(bos);
  config["eos_token"] = eos;
  if (!unk.empty()) config["unk_token"] = unk;
  config["clean_up_tokenization_spaces"] = false;
  config["model_max_length"] = 131072;
  config["tokenizer_class"] = tokenizer_class;
  if (chat_template != nullptr) config["chat_template"] = chat_template;
  TS_RETURN_IF_ERROR(WriteJson(fs::path(dir) / "tokenizer_config.json", config));
  OrderedJson map = OrderedJson::object();
  if (!bos.empty()) map["bos_token"] = bos;
  map["eos_token"] = eos;
  if (!unk.empty()) map["unk_token"] = unk;
  return WriteJson(fs::path(dir) / "special_tokens_map.json", map);
}

}  // namespace

StatusOr<HfTokenizerStyle> ParseHfTokenizerStyle(std::string_view name) {
  if (name == "llama-3") return HfTokenizerStyle::kLlama3;
  if (name == "qwen2") return HfTokenizerStyle::kQwen2;
  if (name == "smollm") return HfTokenizerStyle::kSmolLM;
  if (name == "tinyllama") return HfTokenizerStyle::kTinyLlama;
  return InvalidArgument("unknown tokenizer style '" + std::string(name) +
                         "' (known: llama-3, qwen2, smollm, tinyllama)");
}

Status WriteHfTokenizerFromLlama2c(const std::string& tokenizer_bin_path, int32_t vocab_size,
                                   const std::string& dir) {
  StatusOr<SentencePieceVocab> vocab = ReadLlama2cVocab(tokenizer_bin_path, vocab_size);
  if (!vocab.ok()) return vocab.status();
  const std::vector<std::string>& pieces = vocab->pieces;
  const std::vector<float>& scores = vocab->scores;

  // HF names: <unk>, <s>, </s> for the specials (llama2.c stores "\n<s>\n"), ▁ for spaces.
  std::vector<std::string> names(pieces.size());
  std::unordered_map<std::string, int32_t> ids;
  for (int32_t id = 0; id < vocab_size; ++id) {
    names[id] = id == 0 ? "<unk>" : id == 1 ? "<s>" : id == 2 ? "</s>" : ReplaceSpaces(pieces[id]);
    if (!ids.emplace(names[id], id).second) {
      return InvalidArgument(tokenizer_bin_path + ": token " + std::to_string(id) + " '" +
                             pieces[id] + "' repeats token " + std::to_string(ids[names[id]]) +
                             "; tokenizer.json needs distinct tokens");
    }
  }
  // run.c merges the adjacent pair whose concatenation has the highest score: every split (a, b)
  // of a piece p into two pieces is a rule with p's score. As ranks: score descending, then id.
  struct Rule {
    float score;
    int32_t id;
    size_t split;
  };
  std::vector<Rule> rules;
  for (int32_t id = 3; id < vocab_size; ++id) {
    if (!(scores[id] > -1e10f)) continue;  // run.c never merges these
    const std::string& p = pieces[id];
    for (size_t k = 1; k < p.size(); ++k) {
      if (ids.count(ReplaceSpaces(p.substr(0, k))) && ids.count(ReplaceSpaces(p.substr(k)))) {
        rules.push_back({scores[id], id, k});
      }
    }
  }
  std::stable_sort(rules.begin(), rules.end(), [](const Rule& a, const Rule& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.id < b.id;
  });
  OrderedJson merges = OrderedJson::array();
  for (const Rule& r : rules) {
    const std::string& p = pieces[r.id];
    merges.push_back(ReplaceSpaces(p.substr(0, r.split)) + " " + ReplaceSpaces(p.substr(r.split)));
  }
  OrderedJson vocab_json = OrderedJson::object();
  for (int32_t id = 0; id < vocab_size; ++id) AppendKey(vocab_json, names[id], id);

  OrderedJson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] =
      OrderedJson::array({AddedTokenJson(0, "<unk>", true), AddedTokenJson(1, "<s>", true),
                          AddedTokenJson(2, "</s>", true)});
  root["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       OrderedJson::array(
           {{{"type", "Prepend"}, {"prepend", kMetaspace}},
            {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}}})}};
  root["pre_tokenizer"] = nullptr;
  root["post_processor"] = BosTemplate("<s>", 1);
  root["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       OrderedJson::array(
           {{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
            {{"type", "ByteFallback"}},
            {{"type", "Fuse"}},
            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", "<unk>"},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", true},
                   {"byte_fallback", true},
                   {"ignore_merges", false},
                   {"vocab", std::move(vocab_json)},
                   {"merges", std::move(merges)}};
  TS_RETURN_IF_ERROR(MakeDir(dir));
  TS_RETURN_IF_ERROR(WriteJson(std::filesystem::path(dir) / "tokenizer.json", root));
  return WriteConfigs(dir, "<s>", "</s>", "<unk>", true, nullptr, "LlamaTokenizer");
}

Status WriteSyntheticHfTokenizer(int32_t vocab_size, HfTokenizerStyle style,
                                 const std::string& dir) {
  const StyleInfo info = Style(style);
  // Which ids are special tokens, and their texts.
  std::map<int32_t, std::string> special;
  for (const auto& [id, text] : info.named) special[id] = text;
  const int32_t min_size = special.rbegin()->first + 1;
  if (vocab_size < min_size || vocab_size - static_cast<int32_t>(special.size()) < 256 ||
      (info.reserved_from >= 0 && info.reserved_from < 256)) {
    return InvalidArgument("vocab_size " + std::to_string(vocab_size) +
                           " is too small for this tokenizer style (its special tokens go up to "
                           "id " +
                           std::to_string(min_size - 1) + ", and 256 byte tokens are needed)");
  }
  if (info.reserved_from >= 0) {
    int32_t k = 0;
    for (int32_t id = info.reserved_from; id < vocab_size; ++id) {
      if (!special.count(id))
        special[id] = "<|reserved_special_token_" + std::to_string(k++) + "|>";
    }
  }
  const size_t num_merges = static_cast<size_t>(vocab_size) - special.size() - 256;
  const auto merges = SyntheticMerges(num_merges);

  // Ids in order: special tokens at their ids, the 256 bytes then the merge results elsewhere.
  std::vector<std::string> normal;
  for (int b = 0; b < 256; ++b) normal.push_back(Gpt2ByteToUnicode()[b]);
  for (const auto& [a, b] : merges) normal.push_back(a + b);
  OrderedJson vocab = OrderedJson::object();
  OrderedJson added = OrderedJson::array();
  size_t next = 0;
  for (int32_t id = 0; id < vocab_size; ++id) {
    auto it = special.find(id);
    if (it != special.end()) {
      AppendKey(vocab, it->second, id);
      added.push_back(AddedTokenJson(id, it->second, true));
    } else {
      AppendKey(vocab, normal[next++], id);
    }
  }
  OrderedJson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = std::move(added);
  root["normalizer"] = nullptr;
  const int32_t bos_id = [&] {
    for (const auto& [id, text] : special) {
      if (text == info.bos) return id;
    }
    return -1;
  }();
  switch (style) {
    case HfTokenizerStyle::kLlama3:
      root["pre_tokenizer"] = {
          {"type", "Sequence"},
          {"pretokenizers", OrderedJson::array({SplitStep(kLlama3Regex), ByteLevelStep(false)})}};
      root["post_processor"] = {
          {"type", "Sequence"},
          {"processors",
           OrderedJson::array({ByteLevelStep(false), BosTemplate(info.bos, bos_id)})}};
      break;
    case HfTokenizerStyle::kQwen2:
      root["normalizer"] = {{"type", "NFC"}};
      root["pre_tokenizer"] = {
          {"type", "Sequence"},
          {"pretokenizers", OrderedJson::array({SplitStep(kQwen2Regex), ByteLevelStep(false)})}};
      root["post_processor"] = ByteLevelStep(false);
      break;
    case HfTokenizerStyle::kSmolLM:
      root["pre_tokenizer"] = {
          {"type", "Sequence"},
          {"pretokenizers", OrderedJson::array({{{"type", "Digits"}, {"individual_digits", true}},
                                                ByteLevelStep(true)})}};
      root["post_processor"] = ByteLevelStep(true);
      break;
    case HfTokenizerStyle::kTinyLlama:
      root["pre_tokenizer"] = ByteLevelStep(true);
      root["post_processor"] = BosTemplate(info.bos, bos_id);
      break;
  }
  root["decoder"] = ByteLevelStep(true);
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", style == HfTokenizerStyle::kLlama3},
                   {"vocab", std::move(vocab)},
                   {"merges", Merges(merges)}};
  TS_RETURN_IF_ERROR(MakeDir(dir));
  TS_RETURN_IF_ERROR(WriteJson(std::filesystem::path(dir) / "tokenizer.json", root));
  return WriteConfigs(
      dir, info.bos, info.eos, style == HfTokenizerStyle::kTinyLlama ? "<unk>" : "", info.add_bos,
      info.chat_template,
      style == HfTokenizerStyle::kTinyLlama ? "LlamaTokenizer" : "PreTrainedTokenizerFast");
}

}  // namespace tinyserve
