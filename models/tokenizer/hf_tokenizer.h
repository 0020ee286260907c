// Hugging Face tokenizer files: tokenizer.json (+ tokenizer_config.json, generation_config.json)
// as a model directory from the hub holds them, and writers that produce such files.
//
// tokenizer.json support (anything else is an InvalidArgument naming the file and the field):
//   model          BPE with `vocab` and `merges` (strings "a b" or pairs ["a", "b"]); ranks are
//                  merge order (first merges first, leftmost on ties); byte_fallback ("<0xNN>"
//                  tokens), unk_token + fuse_unk, ignore_merges (a whole word in the vocabulary is
//                  one token). No dropout, continuing_subword_prefix or end_of_word_suffix.
//   normalizer     null, Prepend, Replace (String pattern), NFC, Sequence of these.
//   pre_tokenizer  null, ByteLevel (add_prefix_space, use_regex: GPT-2's regex), Split (a Regex
//                  or String pattern, behavior Isolated or Removed, invert false), Digits,
//                  Metaspace (replacement, prepend_scheme always/first/never, split), Sequence.
//   decoder        ByteLevel; or Sequence of Replace, ByteFallback, Fuse, Strip, Metaspace.
//   post_processor only read for BOS: TemplateProcessing whose `single` starts with a special
//                  token means "add that BOS"; ByteLevel / null add nothing.
//   added_tokens   matched in the text before the model, earliest then longest. Those with
//                  "special": true are the vocabulary's special tokens: Encode() treats their text
//                  as plain text (the Tokenizer contract), special_tokens() lists them for chat
//                  templates. Non-special added tokens are always matched (HF's behaviour).
//
// The two families this covers:
//   byte-level (GPT-2, Llama-3, Qwen2, SmolLM): ByteLevel pre-tokenizer (maybe after a Split
//     with the file's regex), ByteLevel decoder: lossless, Decode(Encode(x)) == x for any bytes.
//   SentencePiece-style (Llama-2, TinyLlama, Mistral): "▁" via Prepend+Replace normalizer or the
//     Metaspace pre-tokenizer, byte fallback, decoder Replace("▁"," ")+ByteFallback+Fuse+Strip:
//     lossless for valid UTF-8 text that does not start with a space (the Strip of the first
//     space undoes the prepended "▁"); DecodePiece drops the leading space of a token that
//     follows BOS or starts the sequence, as the Strip decoder does.
// The tokenizers are immutable and thread-safe, like every Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve {

// What a model directory says about tokenization.
struct HfTokenizerFiles {
  std::unique_ptr<Tokenizer> tokenizer;  // from tokenizer.json
  // tokenizer_config.json's bos_token as an id (-1: none or null).
  int32_t bos_token_id = -1;
  // generation_config.json's eos_token_id (an int or a list of ints), else tokenizer_config.json's
  // eos_token as an id; empty when neither says. Generation stops at any of them.
  std::vector<int32_t> eos_token_ids;
  // tokenizer_config.json's add_bos_token; when absent, whether tokenizer.json's post_processor
  // prepends a BOS. Tokenizer::add_bos_by_default() returns the same value.
  bool add_bos_token = false;
  // The chat template family ("llama-2", "llama-3", "chatml", "qwen2", "qwen2.5", "smollm2",
  // "zephyr", "mistral", ...: the names RenderChatTemplate in server/protocol/chat_template.h
  // knows) that tokenizer_config.json's `chat_template` is recognised as, or "" when the directory
  // has none or it is not recognised.
  std::string chat_template_name;
  // Why the directory's chat template was not recognised (RecognizeHfChatTemplate's message,
  // naming the file), or "": not an error here, since --chat-template may override it
  // (ChooseChatTemplate in server/protocol/chat_template.h decides).
  std::string chat_template_error;
};

// Loads `dir`/tokenizer.json (required), `dir`/tokenizer_config.json (optional: without it BOS,
// EOS and add_bos come from tokenizer.json as in LoadHfTokenizerJson; the chat template then comes
// from `dir`/chat_template.jinja if present) and `dir`/generation_config.json (optional). Errors
// name the file and the problem: a missing tokenizer.json (NotFound), malformed JSON, an
// unsupported model/normalizer/pre-tokenizer/decoder type (naming the field), a bos/eos token that
// is not in the vocabulary, add_bos_token without a bos_token, an eos_token_id outside the
// vocabulary. A chat_template that is present but not recognised is no error here: it is reported
// in chat_template_error.
StatusOr<HfTokenizerFiles> LoadHfTokenizer(const std::string& dir);

// Loads a tokenizer.json alone. BOS/EOS come from the file itself: BOS from the post_processor
// (TemplateProcessing) if any, EOS from the added special tokens named "</s>", "<|endoftext|>",
// "<|end_of_text|>" or "<|im_end|>" (first found), -1 otherwise; add_bos_by_default() is true iff
// the post_processor prepends BOS.
StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerJson(const std::string& path);

// The chat template family a tokenizer_config.json `chat_template` (a Jinja string) is, judged by
// its distinctive markers:
//   "llama-3.2" those markers with "Cutting Knowledge Date: December 2023", "Today Date: " and
//              strftime_now (Llama 3.2)
//   "llama-3.1" the same without strftime_now (Llama 3.1, 3.3: "26 Jul 2024")
//   "llama-3"  <|start_header_id|> ... <|end_header_id|> ... <|eot_id|> without them (Llama 3.0)
//   "qwen2.5"  ChatML with Qwen 2.5's default system message ("You are Qwen, created by ...")
//   "smollm2"  ChatML with SmolLM2's default system message ("You are a helpful AI assistant
//              named SmolLM, trained by Hugging Face")
//   "qwen2"    ChatML with Qwen 2's default system message ("You are a helpful assistant.")
//   "chatml"   <|im_start|> ... <|im_end|> (SmolLM)
//   "zephyr"   <|user|>, <|assistant|> and eos_token (TinyLlama, Zephyr)
//   "llama-2"  [INST] ... [/INST] with <<SYS>> (Llama-2-chat)
//   "mistral"  [INST] ... [/INST] with [AVAILABLE_TOOLS], [/AVAILABLE_TOOLS], [TOOL_CALLS] and
//              [TOOL_RESULTS] (Mistral-7B-Instruct-v0.3; the older Mistral templates are refused)
// Anything else is InvalidArgument ("unrecognised chat template ..."): never a silent guess.
// `source` names the file in errors.
StatusOr<std::string> RecognizeHfChatTemplate(std::string_view jinja, const std::string& source);

// Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json into `dir` (created if
// missing) for the llama2.c tokenizer `tokenizer_bin_path` holding `vocab_size` tokens (see
// llama2c_tokenizer.h): SentencePiece-style BPE (Prepend/Replace "▁" normalizer, byte fallback,
// <unk>=0, <s>=1, </s>=2, add_bos_token true, no chat template) whose merges are derived from the
// llama2.c scores so that LoadHfTokenizer(dir) encodes exactly as LoadLlama2cTokenizer does.
// Errors: those of reading the llama2.c file, or an I/O error naming the file written.
Status WriteHfTokenizerFromLlama2c(const std::string& tokenizer_bin_path, int32_t vocab_size,
                                   const std::string& dir);

// The tokenizer family a synthetic tokenizer imitates: its special tokens (texts and ids as in
// the published tokenizer), BOS rule, pre-tokenizer and chat template.
enum class HfTokenizerStyle {
  kLlama3,     // <|begin_of_text|>=128000 (BOS, added), <|end_of_text|>=128001, header ids and
               // <|eot_id|>=128009, <|reserved_special_token_N|> up to vocab_size; Split(regex) +
               // ByteLevel; ignore_merges; Llama 3.0 chat template (eos <|eot_id|>).
               // vocab_size >= 128010 (128256 in the published tokenizer).
  kQwen2,      // <|endoftext|>=151643, <|im_start|>=151644, <|im_end|>=151645 (eos), then
               // reserved specials up to vocab_size; no BOS; NFC; Split(regex) + ByteLevel;
               // Qwen2.5 chat template. vocab_size >= 151646.
  kSmolLM,     // <|endoftext|>=0, <|im_start|>=1 (bos, not added), <|im_end|>=2 (eos);
               // Digits + ByteLevel; ChatML template. vocab_size >= 259.
  kTinyLlama,  // <unk>=0, <s>=1 (BOS, added), </s>=2 (eos); ByteLevel; Zephyr chat template.
               // vocab_size >= 259.
};

// "llama-3", "qwen2", "smollm", "tinyllama" -> style; InvalidArgument for other names.
StatusOr<HfTokenizerStyle> ParseHfTokenizerStyle(std::string_view name);

// Writes a valid byte-level BPE tokenizer.json, tokenizer_config.json (bos/eos, add_bos_token,
// chat_template) and special_tokens_map.json into `dir` (created if missing), with exactly
// `vocab_size` ids: the 256 byte tokens, deterministic merges (letter n-grams, shortest first)
// and the style's special tokens at their ids. Deterministic: same arguments, same bytes.
// LoadHfTokenizer(dir) loads it and its vocab_size() is `vocab_size`. Errors: InvalidArgument when
// vocab_size is too small for the style, an I/O error naming the file.
Status WriteSyntheticHfTokenizer(int32_t vocab_size, HfTokenizerStyle style,
                                 const std::string& dir);

}  // namespace tinyserve
