#include "models/tokenizer/hf_bpe.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <utility>

#include "base/utf8.h"
#include "models/tokenizer/byte_level_bpe.h"
#include "models/tokenizer/sentencepiece_bpe.h"

namespace tinyserve {
namespace {

// The length of the UTF-8 character starting at text[i]: the lead byte and up to 3 continuation
// bytes after it (a stray byte is a character of its own).
size_t CharLength(std::string_view text, size_t i) {
  size_t end = i + 1;
  while (end < text.size() && end - i < 4 &&
         (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    ++end;
  }
  return end - i;
}

// Unicode NFC of `text`; text that is ASCII or not valid UTF-8 is returned as it is.
std::string Nfc(std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii || !IsValidUtf8(text)) return std::string(text);
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(error);
  if (U_FAILURE(error)) return std::string(text);
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  nfc->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink,
                     nullptr, error);
  if (U_FAILURE(error)) return std::string(text);
  return out;
}

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t at = text.find(from, pos);
    if (at == std::string_view::npos) break;
    out.append(text.substr(pos, at - pos));
    out.append(to);
    pos = at + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

std::string BytePiece(int b) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  return std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
}

struct Split {
  std::string text;
  bool at_start;  // the split begins the whole text
};

}  // namespace

HfBpeTokenizer::HfBpeTokenizer(HfBpeSpec spec) : spec_(std::move(spec)) {}
HfBpeTokenizer::~HfBpeTokenizer() = default;

StatusOr<std::unique_ptr<HfBpeTokenizer>> HfBpeTokenizer::Create(HfBpeSpec spec,
                                                                 const std::string& source) {
  std::unique_ptr<HfBpeTokenizer> tokenizer(new HfBpeTokenizer(std::move(spec)));
  TS_RETURN_IF_ERROR(tokenizer->Build(source));
  return tokenizer;
}

Status HfBpeTokenizer::Build(const std::string& source) {
  const size_t n = spec_.tokens.size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument(source + ": vocabulary has " + std::to_string(n) + " tokens");
  }
  if (spec_.kinds.size() != n || spec_.added_is_special.size() != spec_.added_tokens.size()) {
    return Internal(source + ": inconsistent tokenizer spec sizes");
  }
  const int32_t size = static_cast<int32_t>(n);
  for (auto [name, id] : {std::pair<const char*, int32_t>{"BOS", spec_.bos_id},
                          {"EOS", spec_.eos_id},
                          {"unknown", spec_.unk_id}}) {
    if (id < -1 || id >= size) {
      return InvalidArgument(source + ": " + name + " token id " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(size));
    }
  }
  for (int32_t id = 0; id < size; ++id) {
    const std::string& token = spec_.tokens[id];
    if (token.empty()) continue;
    all_ids_.emplace(std::string_view(token), id);  // the first id of a duplicate wins
  }
  model_ids_ = all_ids_;

  for (size_t i = 0; i < spec_.pre_tokenizers.size(); ++i) {
    const HfPreTokenizerStep& step = spec_.pre_tokenizers[i];
    std::unique_ptr<Gpt2PreTokenizer> regex;
    if (step.kind == HfPreTokenizerStep::Kind::kByteLevel) {
      if (i + 1 != spec_.pre_tokenizers.size()) {
        return InvalidArgument(source + ": pre_tokenizer: ByteLevel must be the last step");
      }
      byte_level_ = true;
      if (step.use_regex) {
        StatusOr<std::unique_ptr<Gpt2PreTokenizer>> pre = Gpt2PreTokenizer::Create();
        if (!pre.ok()) return pre.status();
        regex = std::move(pre).value();
      }
    } else if (step.kind == HfPreTokenizerStep::Kind::kSplit ||
               step.kind == HfPreTokenizerStep::Kind::kDigits) {
      const std::string pattern = step.kind == HfPreTokenizerStep::Kind::kSplit ? step.pattern
                                  : step.individual_digits                      ? "\\p{N}"
                                                                                : "\\p{N}+";
      StatusOr<std::unique_ptr<Gpt2PreTokenizer>> pre = Gpt2PreTokenizer::Create(pattern);
      if (!pre.ok()) {
        return InvalidArgument(source + ": pre_tokenizer Split pattern: " + pre.status().message());
      }
      regex = std::move(pre).value();
    }
    regexes_.push_back(std::move(regex));
  }

  fallback_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = model_ids_.find(BytePiece(b));
    if (it != model_ids_.end()) fallback_ids_[b] = it->second;
  }
  if (byte_level_) {
    const auto& byte_to_unicode = Gpt2ByteToUnicode();
    for (int b = 0; b < 256; ++b) {
      auto it = model_ids_.find(byte_to_unicode[b]);
      if (it == model_ids_.end()) {
        return InvalidArgument(source + ": byte-level vocabulary has no token for byte " +
                               std::to_string(b) + " ('" + byte_to_unicode[b] + "')");
      }
      byte_ids_[b] = it->second;
    }
  }
  // Scores are -rank in a float: exact up to 2^24 merges.
  if (spec_.merges.size() > (size_t{1} << 24)) {
    return InvalidArgument(source + ": " + std::to_string(spec_.merges.size()) +
                           " merges; at most 2^24 are supported");
  }
  for (size_t rank = 0; rank < spec_.merges.size(); ++rank) {
    const auto& [left, right] = spec_.merges[rank];
    auto l = model_ids_.find(left);
    auto r = model_ids_.find(right);
    auto m = model_ids_.find(left + right);
    if (l == model_ids_.end() || r == model_ids_.end() || m == model_ids_.end()) {
      return InvalidArgument(source + ": model.merges[" + std::to_string(rank) + "] '" + left +
                             " " + right + "' has a part or a result that is not in the vocab");
    }
    // The first (lowest-rank) rule for a pair wins, as in a rank lookup.
    if (merges_.Find(l->second, r->second) == nullptr) {
      merges_.Add(l->second, r->second, {-static_cast<float>(rank), m->second});
    }
  }

  std::vector<AddedToken> plain;
  for (size_t i = 0; i < spec_.added_tokens.size(); ++i) {
    if (!spec_.added_is_special[i]) plain.push_back(spec_.added_tokens[i]);
  }
  plain_added_ = AddedTokenMatcher(std::move(plain));

  decoded_.resize(n);
  for (int32_t id = 0; id < size; ++id) {
    if (IsSpecialKind(spec_.kinds[id])) continue;
    const std::string& token = spec_.tokens[id];
    if (spec_.decode_byte_level) {
      decoded_[id] = ByteLevelTokenBytes(token);
    } else if (const int byte = spec_.decode_byte_fallback ? ParseBytePiece(token) : -1;
               byte >= 0 && token == BytePiece(byte)) {
      decoded_[id] = std::string(1, static_cast<char>(byte));
    } else {
      decoded_[id] = ReplaceAll(token, spec_.decode_replace, " ");
    }
  }
  return Status::Ok();
}

int32_t HfBpeTokenizer::TokenId(std::string_view token) const {
  auto it = all_ids_.find(token);
  return it == all_ids_.end() ? -1 : it->second;
}

std::vector<int32_t> HfBpeTokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos && spec_.bos_id >= 0) ids.push_back(spec_.bos_id);
  std::vector<int32_t> rest = EncodeSpan(text, /*at_start=*/true);
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

std::vector<int32_t> HfBpeTokenizer::EncodeSpan(std::string_view span, bool at_start) const {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < span.size()) {
    std::optional<AddedTokenMatcher::Match> m = plain_added_.Find(span, pos);
    if (!m) break;
    if (m->begin > pos) EncodeText(span.substr(pos, m->begin - pos), at_start && pos == 0, ids);
    ids.push_back(m->id);
    pos = m->end;
  }
  if (pos < span.size()) EncodeText(span.substr(pos), at_start && pos == 0, ids);
  return ids;
}

void HfBpeTokenizer::EncodeText(std::string_view text, bool at_start,
                                std::vector<int32_t>& ids) const {
  std::string normalized(text);
  for (const HfNormalizerStep& step : spec_.normalizers) {
    switch (step.kind) {
      case HfNormalizerStep::Kind::kPrepend:
        if (!normalized.empty()) normalized = step.text + normalized;
        break;
      case HfNormalizerStep::Kind::kReplace:
        normalized = ReplaceAll(normalized, step.text, step.content);
        break;
      case HfNormalizerStep::Kind::kNfc:
        normalized = Nfc(normalized);
        break;
    }
  }
  std::vector<Split> splits;
  if (!normalized.empty()) splits.push_back({std::move(normalized), at_start});
  std::vector<Split> next;
  for (size_t s = 0; s < spec_.pre_tokenizers.size(); ++s) {
    const HfPreTokenizerStep& step = spec_.pre_tokenizers[s];
    next.clear();
    for (Split& split : splits) {
      std::string& t = split.text;
      if (step.kind == HfPreTokenizerStep::Kind::kByteLevel && step.add_prefix_space &&
          !t.empty() && t[0] != ' ') {
        t.insert(0, " ");
      }
      if (step.kind == HfPreTokenizerStep::Kind::kMetaspace) {
        t = ReplaceAll(t, " ", step.replacement);
        const bool starts = t.compare(0, step.replacement.size(), step.replacement) == 0;
        if (!t.empty() && !starts &&
            (step.prepend == HfPreTokenizerStep::Prepend::kAlways ||
             (step.prepend == HfPreTokenizerStep::Prepend::kFirst && split.at_start))) {
          t.insert(0, step.replacement);
        }
        if (!step.split || step.replacement.empty()) {
          next.push_back(std::move(split));
          continue;
        }
        // Split before each replacement (HF's MergedWithNext).
        size_t begin = 0;
        while (begin < t.size()) {
          size_t at = t.find(step.replacement, begin + 1);
          if (at == std::string::npos) at = t.size();
          next.push_back({t.substr(begin, at - begin), split.at_start && begin == 0});
          begin = at;
        }
        continue;
      }
      if (regexes_[s] == nullptr) {
        next.push_back(std::move(split));
        continue;
      }
      bool first = true;
      for (std::string_view chunk : regexes_[s]->Split(t)) {
        next.push_back({std::string(chunk), split.at_start && first});
        first = false;
      }
    }
    splits.swap(next);
  }
  for (const Split& split : splits) {
    if (!split.text.empty()) EncodeWord(split.text, ids);
  }
}

void HfBpeTokenizer::EncodeWord(const std::string& word, std::vector<int32_t>& ids) const {
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  if (byte_level_) {
    if (spec_.ignore_merges) {
      std::string mapped;
      for (char c : word) mapped += Gpt2ByteToUnicode()[static_cast<unsigned char>(c)];
      auto it = model_ids_.find(mapped);
      if (it != model_ids_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    for (char c : word) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
  } else {
    if (spec_.ignore_merges) {
      auto it = model_ids_.find(word);
      if (it != model_ids_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    bool last_was_unk = false;
    for (size_t i = 0; i < word.size();) {
      const size_t len = CharLength(word, i);
      const std::string_view ch(word.data() + i, len);
      i += len;
      auto it = model_ids_.find(ch);
      if (it != model_ids_.end()) {
        symbols.push_back(it->second);
        last_was_unk = false;
        continue;
      }
      bool all_bytes = spec_.byte_fallback;
      for (char c : ch) all_bytes = all_bytes && fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        for (char c : ch) symbols.push_back(fallback_ids_[static_cast<unsigned char>(c)]);
        last_was_unk = false;
      } else if (spec_.unk_id >= 0 && !(spec_.fuse_unk && last_was_unk)) {
        symbols.push_back(spec_.unk_id);
        last_was_unk = true;
      }
    }
  }
  ApplyBpeMerges(merges_, symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

std::string HfBpeTokenizer::DecodePiece(int32_t prev_id, int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  const std::string& text = decoded_[id];
  if (spec_.decode_strip_leading_space && (prev_id < 0 || prev_id == spec_.bos_id) &&
      !text.empty() && text[0] == ' ') {
    return text.substr(1);
  }
  return text;
}

bool HfBpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && IsSpecialKind(spec_.kinds[id]);
}

std::vector<std::pair<std::string, int32_t>> HfBpeTokenizer::special_tokens() const {
  std::vector<std::pair<std::string, int32_t>> out;
  for (size_t i = 0; i < spec_.added_tokens.size(); ++i) {
    if (spec_.added_is_special[i]) {
      out.emplace_back(spec_.added_tokens[i].text, spec_.added_tokens[i].id);
    }
  }
  return out;
}

}  // namespace tinyserve
