// Hugging Face model directories: config.json + model.safetensors, or sharded checkpoints
// (model.safetensors.index.json naming a shard per tensor), loaded into fp32 LlamaWeights; and
// the writer of such directories (convert, gen-model).
//
// Tensor names (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM): model.embed_tokens.weight
// [vocab, hidden]; per layer i, model.layers.i.{input_layernorm,post_attention_layernorm}.weight
// [hidden], self_attn.{q,k,v,o}_proj.weight, self_attn.{q,k,v}_proj.bias (attention bias only),
// mlp.{gate,up,down}_proj.weight; model.norm.weight [hidden]; lm_head.weight [vocab, hidden]
// unless tie_word_embeddings (then a lm_head.weight present is ignored, as transformers ties it).
// Old checkpoints' self_attn.rotary_emb.inv_freq buffers are ignored. The checkpoint must match the
// config exactly: every missing, extra or mis-shaped tensor is named in one error. q/k rows stay
// in HF's half-split order (rope_style kNeox).
//
// Load time is bounded by reading the bytes once: files are memory-mapped, every tensor is
// converted (F32/F16/BF16 -> fp32) straight into its place, and its mapped pages are released as
// soon as it has been converted, so the peak resident memory is the fp32 weights plus one tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "models/hf_config.h"
#include "models/llama_weights.h"
#include "models/tensor_dtype.h"

namespace tinyserve {

// Returns true iff `dir` is a directory holding a config.json.
bool IsHfModelDir(const std::string& dir);

// Loads `dir`/config.json and its safetensors weights. The config's name is the directory's name.
StatusOr<std::shared_ptr<LlamaWeights>> LoadHfModel(const std::string& dir);

// Writes `weights` into `dir` (created if missing) as config.json (architecture `architecture`)
// and model.safetensors in `dtype`. Interleaved q/k rows (llama2.c) are permuted to HF's half-split
// order exactly as transformers' convert_llama_weights_to_hf.py permute() does, so LoadHfModel
// gives back the same model with rope_style kNeox.
Status WriteHfModel(const LlamaWeights& weights, const std::string& architecture, TensorDtype dtype,
                    const std::string& dir);

// The row order convert_llama_weights_to_hf.py's permute() gives a [num_heads * head_dim, *] q or
// k matrix: new row h*head_dim + j*half + i is old row h*head_dim + 2*i + j (j in {0, 1}).
// Returns, for each new row, the old row it comes from.
std::vector<int32_t> InterleavedToHalfSplitRows(int32_t num_heads, int32_t head_dim);

}  // namespace tinyserve
