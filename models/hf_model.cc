#include "models/hf_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "models/safetensors.h"

namespace tinyserve {
namespace fs = std::filesystem;
namespace {

constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kSingleFile = "model.safetensors";

// Every tensor of a checkpoint, over one file or several shards.
struct Checkpoint {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsTensor*>> tensors;
};

Status AddFile(Checkpoint& ckpt, const std::string& path) {
  StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  ckpt.files.push_back(std::make_unique<SafetensorsFile>(std::move(file).value()));
  const SafetensorsFile* f = ckpt.files.back().get();
  for (const SafetensorsTensor& t : f->tensors()) {
    const auto [it, inserted] = ckpt.tensors.try_emplace(t.name, f, &t);
    if (!inserted) {
      return InvalidArgument(path + ": tensor " + t.name + " is also in " +
                             it->second.first->path());
    }
  }
  return Status::Ok();
}

StatusOr<Checkpoint> OpenCheckpoint(const std::string& dir) {
  Checkpoint ckpt;
  std::error_code ec;
  const fs::path index_path = fs::path(dir) / kIndexFile;
  if (fs::is_regular_file(index_path, ec)) {
    std::ifstream in(index_path);
    const nlohmann::json index = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return InvalidArgument(index_path.string() + ": not a JSON object with a \"weight_map\"");
    }
    // Shard -> the tensors the index puts there, in the index's order of first mention.
    std::map<std::string, std::vector<std::string>> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return InvalidArgument(index_path.string() + ": weight_map[\"" + it.key() +
                               "\"] is not a file name");
      }
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "..") {
        return InvalidArgument(index_path.string() + ": weight_map[\"" + it.key() + "\"] = \"" +
                               shard + "\" is not a file in the model directory");
      }
      shards[shard].push_back(it.key());
    }
    for (const auto& [shard, names] : shards) {
      const fs::path p = fs::path(dir) / shard;
      if (!fs::is_regular_file(p, ec)) {
        return NotFound(p.string() + ": shard missing (" + kIndexFile + " puts " +
                        std::to_string(names.size()) + " tensors there, e.g. " + names[0] + ")");
      }
      TS_RETURN_IF_ERROR(AddFile(ckpt, p.string()));
      const SafetensorsFile* f = ckpt.files.back().get();
      for (const std::string& name : names) {
        if (f->Find(name) == nullptr) {
          return InvalidArgument(p.string() + ": " + kIndexFile + " puts tensor " + name +
                                 " in this shard, but the shard does not hold it");
        }
      }
    }
    return ckpt;
  }
  const fs::path single = fs::path(dir) / kSingleFile;
  if (!fs::is_regular_file(single, ec)) {
    return NotFound(dir + ": no " + kSingleFile + " or " + kIndexFile +
                    " (only safetensors checkpoints are supported)");
  }
  TS_RETURN_IF_ERROR(AddFile(ckpt, single.string()));
  return ckpt;
}

struct ExpectedHfTensor {
  std::string name;
  std::vector<int64_t> shape;
  float* dst;
};

// Tensors the checkpoint may hold that the forward pass does not use.
bool IsIgnorable(const std::string& name, const ModelConfig& c) {
  if (name == "lm_head.weight") return c.shared_classifier;
  const std::string suffix = ".self_attn.rotary_emb.inv_freq";
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool IsHfModelDir(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(fs::path(dir) / "config.json", ec);
}

std::vector<int32_t> InterleavedToHalfSplitRows(int32_t num_heads, int32_t head_dim) {
  const int32_t half = head_dim / 2;
  std::vector<int32_t> from(static_cast<size_t>(num_heads) * head_dim);
  for (int32_t h = 0; h < num_heads; ++h) {
    for (int32_t j = 0; j < 2; ++j) {
      for (int32_t i = 0; i < half; ++i)
        from[h * head_dim + j * half + i] = h * head_dim + 2 * i + j;
    }
  }
  return from;
}

StatusOr<std::shared_ptr<LlamaWeights>> LoadHfModel(const std::string& dir) {
  StatusOr<HfConfig> hf = LoadHfConfig((fs::path(dir) / "config.json").string());
  if (!hf.ok()) return hf.status();
  StatusOr<Checkpoint> ckpt = OpenCheckpoint(dir);
  if (!ckpt.ok()) return ckpt.status();

  auto w = std::make_shared<LlamaWeights>();
  w->config = hf->model;
  ModelConfig& c = w->config;
  c.name = fs::path(dir).lexically_normal().filename().string();
  if (c.name.empty()) c.name = fs::path(dir).lexically_normal().parent_path().filename().string();
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.hidden_dim;
  const int64_t vocab = c.vocab_size;

  // The tensors config.json implies, each with where its fp32 values go.
  w->token_embedding.resize(vocab * dim);
  w->final_norm.resize(dim);
  w->layers.resize(c.num_layers);
  std::vector<ExpectedHfTensor> expected = {
      {"model.embed_tokens.weight", {vocab, dim}, w->token_embedding.data()}};
  for (int32_t l = 0; l < c.num_layers; ++l) {
    LlamaLayerWeights& L = w->layers[l];
    L.attn_norm.resize(dim);
    L.wqkv.resize((q_dim + 2 * kv_dim) * dim);
    L.wo.resize(dim * q_dim);
    L.ffn_norm.resize(dim);
    L.w13.resize(2 * hidden * dim);
    L.w2.resize(dim * hidden);
    expected.push_back({HfLayerName(l, "input_layernorm.weight"), {dim}, L.attn_norm.data()});
    expected.push_back({HfLayerName(l, "self_attn.q_proj.weight"), {q_dim, dim}, L.wqkv.data()});
    expected.push_back(
        {HfLayerName(l, "self_attn.k_proj.weight"), {kv_dim, dim}, L.wqkv.data() + q_dim * dim});
    expected.push_back({HfLayerName(l, "self_attn.v_proj.weight"),
                        {kv_dim, dim},
                        L.wqkv.data() + (q_dim + kv_dim) * dim});
    if (c.attention_bias) {
      L.bqkv.resize(q_dim + 2 * kv_dim);
      expected.push_back({HfLayerName(l, "self_attn.q_proj.bias"), {q_dim}, L.bqkv.data()});
      expected.push_back(
          {HfLayerName(l, "self_attn.k_proj.bias"), {kv_dim}, L.bqkv.data() + q_dim});
      expected.push_back(
          {HfLayerName(l, "self_attn.v_proj.bias"), {kv_dim}, L.bqkv.data() + q_dim + kv_dim});
    }
    expected.push_back({HfLayerName(l, "self_attn.o_proj.weight"), {dim, q_dim}, L.wo.data()});
    expected.push_back(
        {HfLayerName(l, "post_attention_layernorm.weight"), {dim}, L.ffn_norm.data()});
    expected.push_back({HfLayerName(l, "mlp.gate_proj.weight"), {hidden, dim}, L.w13.data()});
    expected.push_back(
        {HfLayerName(l, "mlp.up_proj.weight"), {hidden, dim}, L.w13.data() + hidden * dim});
    expected.push_back({HfLayerName(l, "mlp.down_proj.weight"), {dim, hidden}, L.w2.data()});
  }
  expected.push_back({"model.norm.weight", {dim}, w->final_norm.data()});
  if (!c.shared_classifier) {
    w->classifier.resize(vocab * dim);
    expected.push_back({"lm_head.weight", {vocab, dim}, w->classifier.data()});
  }

  // Optional: the fp8 KV cache's per-tensor scales of each layer (vLLM's names: k_scale and
  // v_scale, or one kv_scale for both, as older checkpoints have), each one positive finite number.
  struct Scale {
    std::string name;
    float* dst;
  };
  std::vector<Scale> scales;
  for (int32_t l = 0; l < c.num_layers; ++l) {
    LlamaLayerWeights& L = w->layers[l];
    scales.push_back({HfLayerName(l, "self_attn.kv_scale"), &L.k_scale});
    scales.push_back({HfLayerName(l, "self_attn.kv_scale"), &L.v_scale});
    scales.push_back({HfLayerName(l, "self_attn.k_scale"), &L.k_scale});
    scales.push_back({HfLayerName(l, "self_attn.v_scale"), &L.v_scale});
  }

  // Check everything first, so one error names every problem.
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  for (const Scale& s : scales) {
    const auto it = ckpt->tensors.find(s.name);
    if (it == ckpt->tensors.end() || !wanted.insert(s.name).second) continue;
    const std::vector<int64_t>& shape = it->second.second->shape;
    if (!(shape.empty() || (shape.size() == 1 && shape[0] == 1))) {
      problems.push_back(s.name + " has shape " + ShapeString(shape) + ", want one value");
    }
  }
  for (const ExpectedHfTensor& e : expected) {
    wanted.insert(e.name);
    const auto it = ckpt->tensors.find(e.name);
    if (it == ckpt->tensors.end()) {
      problems.push_back("missing " + e.name);
    } else if (it->second.second->shape != e.shape) {
      problems.push_back(e.name + " has shape " + ShapeString(it->second.second->shape) +
                         ", config.json implies " + ShapeString(e.shape));
    }
  }
  for (const auto& [name, ref] : ckpt->tensors) {
    if (wanted.count(name) == 0 && !IsIgnorable(name, c)) problems.push_back("extra " + name);
  }
  if (!problems.empty()) {
    std::string msg = dir + ": the checkpoint does not match config.json (" + hf->architecture +
                      ", " + std::to_string(c.num_layers) + " layers): ";
    const size_t shown = std::min<size_t>(problems.size(), 12);
    for (size_t i = 0; i < shown; ++i) msg += (i > 0 ? "; " : "") + problems[i];
    if (problems.size() > shown) {
      msg += "; and " + std::to_string(problems.size() - shown) + " more";
    }
    return InvalidArgument(msg);
  }
  for (const ExpectedHfTensor& e : expected) {
    const auto& [file, tensor] = ckpt->tensors.at(e.name);
    file->ReadF32(*tensor, e.dst);
    file->ReleasePages(*tensor);
  }
  for (const Scale& s : scales) {  // kv_scale first, so a layer's k_scale / v_scale win
    const auto it = ckpt->tensors.find(s.name);
    if (it == ckpt->tensors.end()) continue;
    it->second.first->ReadF32(*it->second.second, s.dst);
    if (!(std::isfinite(*s.dst) && *s.dst > 0.0f)) {
      return InvalidArgument(dir + ": " + s.name + " is " + std::to_string(*s.dst) +
                             ", want a positive finite scale");
    }
  }
  return w;
}

Status WriteHfModel(const LlamaWeights& weights, const std::string& architecture, TensorDtype dtype,
                    const std::string& dir) {
  const ModelConfig& c = weights.config;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InvalidArgument(dir + ": cannot create directory: " + ec.message());
  {
    const fs::path p = fs::path(dir) / "config.json";
    std::ofstream out(p);
    out << HfConfigJson(architecture, c, dtype);
    out.close();
    if (!out) return InvalidArgument(p.string() + ": write failed");
  }
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.hidden_dim;
  const bool permute = c.rope_style == RopeStyle::kInterleaved;
  const std::vector<int32_t> q_rows = InterleavedToHalfSplitRows(c.num_heads, c.head_dim);
  const std::vector<int32_t> k_rows = InterleavedToHalfSplitRows(c.num_kv_heads, c.head_dim);
  // Permuted copies of q and k (weights and bias), alive until the file is written.
  std::vector<std::vector<float>> keep;
  auto rows = [&](const float* src, const std::vector<int32_t>& from, int64_t width) {
    if (!permute) return src;
    std::vector<float> out(from.size() * width);
    for (size_t r = 0; r < from.size(); ++r) {
      std::copy(src + from[r] * width, src + (from[r] + 1) * width, out.begin() + r * width);
    }
    keep.push_back(std::move(out));
    return static_cast<const float*>(keep.back().data());
  };
  keep.reserve(4 * c.num_layers);
  std::vector<SafetensorsWriteTensor> tensors;
  tensors.push_back(TensorFromFloats("model.embed_tokens.weight", {c.vocab_size, dim},
                                     weights.token_embedding.data()));
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LlamaLayerWeights& L = weights.layers[l];
    const float* wq = L.wqkv.data();
    tensors.push_back(
        TensorFromFloats(HfLayerName(l, "input_layernorm.weight"), {dim}, L.attn_norm.data()));
    tensors.push_back(TensorFromFloats(HfLayerName(l, "self_attn.q_proj.weight"), {q_dim, dim},
                                       rows(wq, q_rows, dim)));
    tensors.push_back(TensorFromFloats(HfLayerName(l, "self_attn.k_proj.weight"), {kv_dim, dim},
                                       rows(wq + q_dim * dim, k_rows, dim)));
    tensors.push_back(TensorFromFloats(HfLayerName(l, "self_attn.v_proj.weight"), {kv_dim, dim},
                                       wq + (q_dim + kv_dim) * dim));
    if (!L.bqkv.empty()) {
      const float* b = L.bqkv.data();
      tensors.push_back(
          TensorFromFloats(HfLayerName(l, "self_attn.q_proj.bias"), {q_dim}, rows(b, q_rows, 1)));
      tensors.push_back(TensorFromFloats(HfLayerName(l, "self_attn.k_proj.bias"), {kv_dim},
                                         rows(b + q_dim, k_rows, 1)));
      tensors.push_back(
          TensorFromFloats(HfLayerName(l, "self_attn.v_proj.bias"), {kv_dim}, b + q_dim + kv_dim));
    }
    tensors.push_back(
        TensorFromFloats(HfLayerName(l, "self_attn.o_proj.weight"), {dim, q_dim}, L.wo.data()));
    tensors.push_back(TensorFromFloats(HfLayerName(l, "post_attention_layernorm.weight"), {dim},
                                       L.ffn_norm.data()));
    tensors.push_back(
        TensorFromFloats(HfLayerName(l, "mlp.gate_proj.weight"), {hidden, dim}, L.w13.data()));
    tensors.push_back(TensorFromFloats(HfLayerName(l, "mlp.up_proj.weight"), {hidden, dim},
                                       L.w13.data() + hidden * dim));
    tensors.push_back(
        TensorFromFloats(HfLayerName(l, "mlp.down_proj.weight"), {dim, hidden}, L.w2.data()));
    if (L.k_scale != 1.0f || L.v_scale != 1.0f) {  // fp8 KV-cache scales, as fp32 scalars
      for (const auto& [name, value] : {std::pair{"self_attn.k_scale", &L.k_scale},
                                        std::pair{"self_attn.v_scale", &L.v_scale}}) {
        tensors.push_back(TensorFromFloats(HfLayerName(l, name), {}, value));
        tensors.back().dtype = TensorDtype::kF32;
      }
    }
  }
  tensors.push_back(TensorFromFloats("model.norm.weight", {dim}, weights.final_norm.data()));
  if (!c.shared_classifier) {
    tensors.push_back(
        TensorFromFloats("lm_head.weight", {c.vocab_size, dim}, weights.classifier.data()));
  }
  return WriteSafetensors((fs::path(dir) / kSingleFile).string(), tensors, dtype,
                          {{"format", "pt"}});
}

}  // namespace tinyserve
