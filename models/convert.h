// Converting a llama2.c checkpoint (+ its tokenizer.bin) to a Hugging Face directory or a GGUF
// file (`tinyserve convert`). Both give back the same model: the HF directory with q/k rows
// permuted to the half split (convert_llama_weights_to_hf.py's permute), the GGUF file with them
// as they are (llama.cpp's interleaved order).
#pragma once

#include <string>

#include "base/status.h"
#include "models/gguf_model.h"
#include "models/tensor_dtype.h"

namespace tinyserve {

// Writes `out_dir`: config.json (LlamaForCausalLM; eos_token_id = the checkpoint's stop id, BOS,
// as run.c stops), model.safetensors in `dtype`, tokenizer.json + tokenizer_config.json.
Status ConvertLlama2cToHf(const std::string& model_path, const std::string& tokenizer_path,
                          TensorDtype dtype, const std::string& out_dir);

// Writes `out_path`: a GGUF v3 llama file, tensors in `dtype`, the tokenizer in its metadata.
Status ConvertLlama2cToGguf(const std::string& model_path, const std::string& tokenizer_path,
                            TensorDtype dtype, const std::string& out_path);
// The same with the matrices as `type` says (gguf_model.h: f32 ... q8_0, q4_k_m).
Status ConvertLlama2cToGguf(const std::string& model_path, const std::string& tokenizer_path,
                            GgufWeightType type, const std::string& out_path);

}  // namespace tinyserve
