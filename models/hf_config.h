// Hugging Face config.json for the Llama family: LlamaForCausalLM, MistralForCausalLM and
// Qwen2ForCausalLM, to a ModelConfig (and back, for the writers).
//
// Read: architectures, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
// head_dim, intermediate_size, vocab_size, rms_norm_eps, rope_theta, rope_scaling (rope_type or
// type: "default", "linear", "llama3"), tie_word_embeddings, max_position_embeddings,
// attention_bias (Qwen2 always has q/k/v bias), torch_dtype, bos_token_id, eos_token_id (a number
// or a list), hidden_act (must be silu), mlp_bias (must be false), partial_rotary_factor (must be
// 1), sliding_window / use_sliding_window (Mistral's window caps the context length, which makes
// it exact; Qwen2's use_sliding_window is refused). Missing fields take transformers' defaults for
// the architecture. HF checkpoints store q/k rows in the half-split order, so rope_style is kNeox.
//
// Every error names the file and the field: "DIR/config.json: \"num_key_value_heads\" = 5 does
// not divide num_attention_heads = 32".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/model_config.h"
#include "models/tensor_dtype.h"

namespace tinyserve {

struct HfConfig {
  std::string architecture;  // "LlamaForCausalLM", ...
  ModelConfig model;         // name empty; stop_token_ids = eos_token_id(s); bos -1 if none
  TensorDtype torch_dtype = TensorDtype::kF32;
};

// Parses config.json text; `path` names it in errors.
StatusOr<HfConfig> ParseHfConfig(const std::string& text, const std::string& path);
// Reads and parses the file at `path`.
StatusOr<HfConfig> LoadHfConfig(const std::string& path);

// The checkpoint name of layer `layer`'s tensor `rest`: "model.layers.<layer>.<rest>", as HF
// Llama-family checkpoints name them (the loader and WriteHfModel).
std::string HfLayerName(int32_t layer, const char* rest);

// config.json text for `model` as `architecture`, stating `dtype`, that ParseHfConfig reads back
// to the same ModelConfig (rope_style aside: HF files are always half split).
std::string HfConfigJson(const std::string& architecture, const ModelConfig& model,
                         TensorDtype dtype);

}  // namespace tinyserve
