// Parsing tokenizer.json into an HfBpeSpec, and the model-directory loader (LoadHfTokenizer).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "models/tokenizer/hf_bpe.h"
#include "models/tokenizer/hf_tokenizer.h"
#include "models/tokenizer/sentencepiece_bpe.h"

namespace tinyserve {
namespace {

using Json = nlohmann::json;

// Thrown inside the parser for a file problem; caught at the top with the file's name.
struct ParseError {
  std::string message;
};

[[noreturn]] void Fail(std::string message) { throw ParseError{std::move(message)}; }

StatusOr<Json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open file");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  Json json = Json::parse(bytes.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  return json;
}

// A string field, "" when missing or null.
std::string StringOr(const Json& object, const char* key, const std::string& fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_string()) Fail(std::string("'") + key + "' is not a string");
  return it->get<std::string>();
}

bool BoolOr(const Json& object, const char* key, bool fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) Fail(std::string("'") + key + "' is not a boolean");
  return it->get<bool>();
}

// An integer in [min, max], or a ParseError naming `field`. A float (even 5.0) or an integer out
// of range is refused before any conversion: nlohmann's get<int64_t> on 1e40 is undefined.
int64_t IntegerIn(const Json& v, const std::string& field, int64_t min, int64_t max) {
  if (!v.is_number_integer()) Fail(field + " must be an integer, got " + v.dump());
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(max)
                             : v.get<int64_t>() < min || v.get<int64_t>() > max) {
    Fail(field + " = " + v.dump() + " is out of range [" + std::to_string(min) + ", " +
         std::to_string(max) + "]");
  }
  return v.get<int64_t>();
}

// The integer field `object`.key (named `field`.key in errors) in [min, max], `fallback` when
// missing or null.
int64_t IntegerOr(const Json& object, const std::string& field, const char* key, int64_t fallback,
                  int64_t min, int64_t max) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  return IntegerIn(*it, field + "." + key, min, max);
}

std::string TypeOf(const Json& object, const std::string& field) {
  if (!object.is_object()) Fail(field + " is not an object");
  auto it = object.find("type");
  if (it == object.end() || !it->is_string()) Fail(field + " has no 'type'");
  return it->get<std::string>();
}

// A {"String": s} pattern (a {"Regex": r} one is not supported where a plain string is needed).
std::string StringPattern(const Json& step, const std::string& field) {
  auto it = step.find("pattern");
  if (it == step.end() || !it->is_object()) Fail(field + ".pattern is missing");
  if (it->contains("String") && (*it)["String"].is_string()) return (*it)["String"];
  Fail(field + ".pattern: only {\"String\": ...} patterns are supported here");
}

void ParseNormalizer(const Json& n, const std::string& field, HfBpeSpec& spec) {
  if (n.is_null()) return;
  const std::string type = TypeOf(n, field);
  if (type == "Sequence") {
    const Json& steps = n.at("normalizers");
    for (size_t i = 0; i < steps.size(); ++i) {
      ParseNormalizer(steps[i], field + ".normalizers[" + std::to_string(i) + "]", spec);
    }
  } else if (type == "Prepend") {
    spec.normalizers.push_back({HfNormalizerStep::Kind::kPrepend, n.at("prepend"), ""});
  } else if (type == "Replace") {
    spec.normalizers.push_back(
        {HfNormalizerStep::Kind::kReplace, StringPattern(n, field), n.at("content")});
  } else if (type == "NFC") {
    spec.normalizers.push_back({HfNormalizerStep::Kind::kNfc, "", ""});
  } else {
    Fail(field + ".type '" + type +
         "' is not supported (supported: Sequence, Prepend, Replace, NFC)");
  }
}

HfPreTokenizerStep::Prepend ParsePrependScheme(const Json& step, const std::string& field) {
  if (step.contains("prepend_scheme") && !step["prepend_scheme"].is_null()) {
    const std::string scheme = step["prepend_scheme"];
    if (scheme == "always") return HfPreTokenizerStep::Prepend::kAlways;
    if (scheme == "first") return HfPreTokenizerStep::Prepend::kFirst;
    if (scheme == "never") return HfPreTokenizerStep::Prepend::kNever;
    Fail(field + ".prepend_scheme '" + scheme + "' is not one of always, first, never");
  }
  return BoolOr(step, "add_prefix_space", true) ? HfPreTokenizerStep::Prepend::kAlways
                                                : HfPreTokenizerStep::Prepend::kNever;
}

// A PCRE2 pattern matching `text` literally.
std::string QuoteRegex(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

void ParsePreTokenizer(const Json& p, const std::string& field, HfBpeSpec& spec) {
  if (p.is_null()) return;
  const std::string type = TypeOf(p, field);
  HfPreTokenizerStep step;
  if (type == "Sequence") {
    const Json& steps = p.at("pretokenizers");
    for (size_t i = 0; i < steps.size(); ++i) {
      ParsePreTokenizer(steps[i], field + ".pretokenizers[" + std::to_string(i) + "]", spec);
    }
    return;
  } else if (type == "ByteLevel") {
    step.kind = HfPreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = BoolOr(p, "add_prefix_space", true);
    step.use_regex = BoolOr(p, "use_regex", true);
  } else if (type == "Split") {
    step.kind = HfPreTokenizerStep::Kind::kSplit;
    const Json& pattern = p.at("pattern");
    if (pattern.contains("Regex")) {
      step.pattern = pattern["Regex"];
    } else if (pattern.contains("String")) {
      step.pattern = QuoteRegex(pattern["String"]);
    } else {
      Fail(field + ".pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
    }
    const std::string behavior = StringOr(p, "behavior", "");
    if (behavior != "Isolated") {
      Fail(field + ".behavior '" + behavior + "' is not supported (only Isolated)");
    }
    if (BoolOr(p, "invert", false)) Fail(field + ".invert true is not supported");
  } else if (type == "Digits") {
    step.kind = HfPreTokenizerStep::Kind::kDigits;
    step.individual_digits = BoolOr(p, "individual_digits", false);
  } else if (type == "Metaspace") {
    step.kind = HfPreTokenizerStep::Kind::kMetaspace;
    step.replacement = StringOr(p, "replacement", "\xE2\x96\x81");
    step.prepend = ParsePrependScheme(p, field);
    step.split = BoolOr(p, "split", true);
  } else {
    Fail(field + ".type '" + type +
         "' is not supported (supported: Sequence, ByteLevel, Split, Digits, Metaspace)");
  }
  spec.pre_tokenizers.push_back(std::move(step));
}

void ParseDecoder(const Json& d, const std::string& field, HfBpeSpec& spec) {
  if (d.is_null()) Fail(field + " is null; a decoder is required");
  const std::string type = TypeOf(d, field);
  if (type == "Sequence") {
    const Json& steps = d.at("decoders");
    for (size_t i = 0; i < steps.size(); ++i) {
      ParseDecoder(steps[i], field + ".decoders[" + std::to_string(i) + "]", spec);
    }
  } else if (type == "ByteLevel") {
    spec.decode_byte_level = true;
  } else if (type == "Replace") {
    if (d.at("content") != " ") Fail(field + ": only Replace(..., \" \") is supported");
    spec.decode_replace = StringPattern(d, field);
  } else if (type == "ByteFallback") {
    spec.decode_byte_fallback = true;
  } else if (type == "Fuse") {
    // Joining the pieces is what decoding does anyway.
  } else if (type == "Strip") {
    const int64_t start = IntegerOr(d, field, "start", 0, 0, INT32_MAX);
    const int64_t stop = IntegerOr(d, field, "stop", 0, 0, INT32_MAX);
    if (StringOr(d, "content", "") != " " || start > 1 || stop != 0) {
      Fail(field + ": only Strip(content ' ', start 0 or 1, stop 0) is supported");
    }
    spec.decode_strip_leading_space = start == 1;
  } else if (type == "Metaspace") {
    spec.decode_replace = StringOr(d, "replacement", "\xE2\x96\x81");
    spec.decode_strip_leading_space =
        ParsePrependScheme(d, field) != HfPreTokenizerStep::Prepend::kNever;
  } else {
    Fail(field + ".type '" + type +
         "' is not supported (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, "
         "Strip, Metaspace)");
  }
}

// The BOS text a post_processor prepends, or "" when it prepends nothing.
std::string ParsePostProcessor(const Json& p, const std::string& field) {
  if (p.is_null()) return "";
  const std::string type = TypeOf(p, field);
  if (type == "Sequence") {
    std::string bos;
    const Json& steps = p.at("processors");
    for (size_t i = 0; i < steps.size(); ++i) {
      std::string b =
          ParsePostProcessor(steps[i], field + ".processors[" + std::to_string(i) + "]");
      if (!b.empty()) bos = b;
    }
    return bos;
  }
  if (type == "ByteLevel") return "";
  if (type == "TemplateProcessing") {
    const Json& single = p.at("single");
    if (!single.empty() && single[0].contains("SpecialToken")) {
      return single[0]["SpecialToken"].at("id").get<std::string>();
    }
    return "";
  }
  Fail(field + ".type '" + type +
       "' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
}

struct ParsedJson {
  HfBpeSpec spec;
  std::string post_processor_bos;  // "" when the post_processor adds none
};

ParsedJson ParseTokenizerJson(const Json& root) {
  if (!root.is_object()) Fail("the top level is not an object");
  ParsedJson parsed;
  HfBpeSpec& spec = parsed.spec;
  if (!root.contains("model")) Fail("no 'model'");
  const Json& model = root["model"];
  const std::string type = model.is_object() && model.contains("type") ? model["type"] : "";
  if (type != "BPE") {
    Fail("model.type '" + type + "' is not supported (only BPE)");
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    Fail("model.dropout is not supported");
  }
  if (!StringOr(model, "continuing_subword_prefix", "").empty()) {
    Fail("model.continuing_subword_prefix is not supported");
  }
  if (!StringOr(model, "end_of_word_suffix", "").empty()) {
    Fail("model.end_of_word_suffix is not supported");
  }
  spec.byte_fallback = BoolOr(model, "byte_fallback", false);
  spec.fuse_unk = BoolOr(model, "fuse_unk", false);
  spec.ignore_merges = BoolOr(model, "ignore_merges", false);
  const std::string unk = StringOr(model, "unk_token", "");

  const Json& vocab = model.at("vocab");
  if (!vocab.is_object()) Fail("model.vocab is not an object");
  std::map<int64_t, std::string> by_id;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = IntegerIn(it.value(), "model.vocab['" + it.key() + "']", 0, INT32_MAX - 1);
    if (!by_id.emplace(id, it.key()).second) {
      Fail("model.vocab: id " + std::to_string(id) + " is given to two tokens");
    }
  }
  const Json added = root.value("added_tokens", Json::array());
  for (const Json& a : added) {
    const int64_t id = IntegerIn(a.at("id"), "added_tokens: id", 0, INT32_MAX - 1);
    AddedToken token{a.at("content").get<std::string>(), static_cast<int32_t>(id),
                     BoolOr(a, "lstrip", false), BoolOr(a, "rstrip", false),
                     BoolOr(a, "single_word", false)};
    if (token.text.empty()) Fail("added_tokens: token " + std::to_string(id) + " has no content");
    auto [it, inserted] = by_id.emplace(id, token.text);
    if (!inserted && it->second != token.text) {
      Fail("added_tokens: id " + std::to_string(id) + " is '" + token.text +
           "' but the vocab has '" + it->second + "'");
    }
    spec.added_is_special.push_back(BoolOr(a, "special", false));
    spec.added_tokens.push_back(std::move(token));
  }
  if (by_id.empty()) Fail("model.vocab is empty");
  const size_t size = static_cast<size_t>(by_id.rbegin()->first) + 1;
  spec.tokens.assign(size, "");
  spec.kinds.assign(size, TokenKind::kUnused);
  for (auto& [id, text] : by_id) {
    spec.tokens[id] = std::move(text);
    spec.kinds[id] = TokenKind::kNormal;
  }
  for (size_t i = 0; i < spec.added_tokens.size(); ++i) {
    spec.kinds[spec.added_tokens[i].id] =
        spec.added_is_special[i] ? TokenKind::kControl : TokenKind::kUserDefined;
  }
  for (size_t id = 0; id < size; ++id) {
    if (spec.byte_fallback && ParseBytePiece(spec.tokens[id]) >= 0)
      spec.kinds[id] = TokenKind::kByte;
  }
  if (!unk.empty()) {
    for (size_t id = 0; id < size; ++id) {
      if (spec.tokens[id] == unk) {
        spec.unk_id = static_cast<int32_t>(id);
        spec.kinds[id] = TokenKind::kUnknown;
        break;
      }
    }
    if (spec.unk_id < 0) Fail("model.unk_token '" + unk + "' is not in the vocab");
  }

  const Json& merges = model.at("merges");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m;
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        Fail("model.merges[" + std::to_string(i) + "] '" + s + "' is not of the form \"a b\"");
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      Fail("model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  ParseNormalizer(root.value("normalizer", Json()), "normalizer", spec);
  ParsePreTokenizer(root.value("pre_tokenizer", Json()), "pre_tokenizer", spec);
  ParseDecoder(root.value("decoder", Json()), "decoder", spec);
  parsed.post_processor_bos =
      ParsePostProcessor(root.value("post_processor", Json()), "post_processor");
  return parsed;
}

int32_t FindToken(const HfBpeSpec& spec, const std::string& text) {
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (spec.tokens[id] == text) return static_cast<int32_t>(id);
  }
  return -1;
}

StatusOr<ParsedJson> ReadTokenizerJson(const std::string& path) {
  StatusOr<Json> json = ReadJsonFile(path);
  if (!json.ok()) return json.status();
  try {
    ParsedJson parsed = ParseTokenizerJson(*json);
    const std::string& bos = parsed.post_processor_bos;
    if (!bos.empty()) {
      parsed.spec.bos_id = FindToken(parsed.spec, bos);
      if (parsed.spec.bos_id < 0) Fail("post_processor: BOS '" + bos + "' is not in the vocab");
      parsed.spec.add_bos_by_default = true;
    }
    for (const char* eos : {"</s>", "<|endoftext|>", "<|end_of_text|>", "<|im_end|>"}) {
      if ((parsed.spec.eos_id = FindToken(parsed.spec, eos)) >= 0) break;
    }
    return parsed;
  } catch (const ParseError& e) {
    return InvalidArgument(path + ": " + e.message);
  } catch (const Json::exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
}

// tokenizer_config.json's bos_token / eos_token: a string, an AddedToken object, or null.
std::string ConfigTokenText(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return *it;
  if (it->is_object() && it->contains("content")) return (*it)["content"];
  Fail(std::string("'") + key + "' is neither a string nor an object with 'content'");
}

// generation_config.json's eos_token_id: an int or a list of ints.
std::vector<int32_t> GenerationEos(const Json& config, int32_t vocab_size) {
  std::vector<int32_t> ids;
  auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return ids;
  const Json list = it->is_array() ? *it : Json::array({*it});
  for (const Json& v : list) {
    if (!v.is_number_integer()) Fail("eos_token_id must be an integer or a list of integers");
    if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(vocab_size)
                               : v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_size) {
      Fail("eos_token_id " + v.dump() + " is outside the vocabulary of " +
           std::to_string(vocab_size));
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

// The chat template string of tokenizer_config.json ("" when none): a string, or a list of
// {"name", "template"} whose "default" entry is used.
std::string ConfigChatTemplate(const Json& config) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return *it;
  if (it->is_array()) {
    for (const Json& entry : *it) {
      if (entry.value("name", "") == "default") return entry.at("template");
    }
    Fail("chat_template is a list without a 'default' entry");
  }
  Fail("chat_template is neither a string nor a list");
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerJson(const std::string& path) {
  StatusOr<ParsedJson> parsed = ReadTokenizerJson(path);
  if (!parsed.ok()) return parsed.status();
  StatusOr<std::unique_ptr<HfBpeTokenizer>> tok =
      HfBpeTokenizer::Create(std::move(parsed->spec), path);
  if (!tok.ok()) return tok.status();
  return std::unique_ptr<Tokenizer>(std::move(tok).value());
}

StatusOr<HfTokenizerFiles> LoadHfTokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string json_path = (fs::path(dir) / "tokenizer.json").string();
  if (!fs::exists(json_path)) {
    return NotFound(json_path + ": not found (an HF model directory needs tokenizer.json)");
  }
  StatusOr<ParsedJson> parsed = ReadTokenizerJson(json_path);
  if (!parsed.ok()) return parsed.status();
  HfBpeSpec& spec = parsed->spec;
  HfTokenizerFiles files;
  files.bos_token_id = spec.bos_id;
  files.add_bos_token = spec.add_bos_by_default;
  if (spec.eos_id >= 0) files.eos_token_ids = {spec.eos_id};

  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  std::string chat_template;
  std::string chat_template_source = config_path;
  if (fs::exists(config_path)) {
    StatusOr<Json> config = ReadJsonFile(config_path);
    if (!config.ok()) return config.status();
    try {
      if (!config->is_object()) Fail("the top level is not an object");
      for (const char* key : {"bos_token", "eos_token"}) {
        if (!config->contains(key)) continue;
        const std::string text = ConfigTokenText(*config, key);
        const int32_t id = text.empty() ? -1 : FindToken(spec, text);
        if (!text.empty() && id < 0) Fail(std::string(key) + " '" + text + "' is not in the vocab");
        if (std::string_view(key) == "bos_token") {
          files.bos_token_id = id;
        } else {
          files.eos_token_ids.clear();
          if (id >= 0) files.eos_token_ids.push_back(id);
        }
      }
      files.add_bos_token = BoolOr(*config, "add_bos_token", files.add_bos_token);
      chat_template = ConfigChatTemplate(*config);
    } catch (const ParseError& e) {
      return InvalidArgument(config_path + ": " + e.message);
    } catch (const Json::exception& e) {
      return InvalidArgument(config_path + ": " + e.what());
    }
  }
  if (chat_template.empty()) {  // newer transformers save the template beside the config
    const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
    if (fs::exists(jinja_path)) {
      std::ifstream in(jinja_path, std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      chat_template = text.str();
      chat_template_source = jinja_path;
    }
  }
  if (files.add_bos_token && files.bos_token_id < 0) {
    return InvalidArgument(config_path + ": add_bos_token is true but there is no bos_token");
  }

  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  if (fs::exists(gen_path)) {
    StatusOr<Json> gen = ReadJsonFile(gen_path);
    if (!gen.ok()) return gen.status();
    try {
      if (!gen->is_object()) Fail("the top level is not an object");
      std::vector<int32_t> eos = GenerationEos(*gen, static_cast<int32_t>(spec.tokens.size()));
      if (!eos.empty()) files.eos_token_ids = std::move(eos);
    } catch (const ParseError& e) {
      return InvalidArgument(gen_path + ": " + e.message);
    } catch (const Json::exception& e) {
      return InvalidArgument(gen_path + ": " + e.what());
    }
  }
  if (!chat_template.empty()) {
    StatusOr<std::string> name = RecognizeHfChatTemplate(chat_template, chat_template_source);
    if (name.ok()) {
      files.chat_template_name = *name;
    } else {
      files.chat_template_error = name.status().message();
    }
  }
  spec.bos_id = files.bos_token_id;
  spec.eos_id = files.eos_token_ids.empty() ? -1 : files.eos_token_ids[0];
  spec.add_bos_by_default = files.add_bos_token;
  StatusOr<std::unique_ptr<HfBpeTokenizer>> tok =
      HfBpeTokenizer::Create(std::move(spec), json_path);
  if (!tok.ok()) return tok.status();
  files.tokenizer = std::move(tok).value();
  return files;
}

}  // namespace tinyserve
