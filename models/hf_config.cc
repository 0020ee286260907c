#include "models/hf_config.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tinyserve {
namespace {

using nlohmann::json;

constexpr int64_t kMaxConfigDim = 1 << 24;

// Reads fields of one config.json object, naming the file and field in every error.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string path, std::string prefix = "")
      : obj_(obj), path_(std::move(path)), prefix_(std::move(prefix)) {}

  Status Error(const std::string& field, const std::string& what) const {
    return InvalidArgument(path_ + ": \"" + prefix_ + field + "\" " + what);
  }
  bool Has(const std::string& field) const {
    const auto it = obj_.find(field);
    return it != obj_.end() && !it->is_null();
  }
  const json* Get(const std::string& field) const {
    const auto it = obj_.find(field);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }

  // A positive integer, or `fallback` (when >= 0) if missing.
  StatusOr<int32_t> Int(const std::string& field, int64_t fallback = -1, int64_t min = 1) const {
    const json* v = Get(field);
    if (v == nullptr) {
      if (fallback >= 0) return static_cast<int32_t>(fallback);
      return Error(field, "is missing");
    }
    if (!v->is_number_integer()) return Error(field, "must be an integer, got " + v->dump());
    const int64_t x = v->get<int64_t>();
    if (x < min || x > kMaxConfigDim) {
      return Error(field, "= " + std::to_string(x) + " is out of range [" + std::to_string(min) +
                              ", " + std::to_string(kMaxConfigDim) + "]");
    }
    return static_cast<int32_t>(x);
  }

  StatusOr<double> Number(const std::string& field, double fallback) const {
    const json* v = Get(field);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return Error(field, "must be a number, got " + v->dump());
    const double x = v->get<double>();
    // Every number here is stored as a float: a larger one would not convert (undefined).
    if (!std::isfinite(x) || std::fabs(x) > std::numeric_limits<float>::max()) {
      return Error(field, "= " + v->dump() + " is not a finite float32");
    }
    return x;
  }

  StatusOr<bool> Bool(const std::string& field, bool fallback) const {
    const json* v = Get(field);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(field, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }

  StatusOr<std::string> String(const std::string& field, const std::string& fallback) const {
    const json* v = Get(field);
    if (v == nullptr) return fallback;
    if (!v->is_string()) return Error(field, "must be a string, got " + v->dump());
    return v->get<std::string>();
  }

  // A token id or a list of them (eos_token_id); empty if missing.
  StatusOr<std::vector<int32_t>> Ids(const std::string& field) const {
    std::vector<int32_t> ids;
    const json* v = Get(field);
    if (v == nullptr) return ids;
    const json list = v->is_array() ? *v : json::array({*v});
    for (const json& id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Error(field, "must be a token id or a list of them, got " + v->dump());
      }
      ids.push_back(id.get<int32_t>());
    }
    return ids;
  }

 private:
  const json& obj_;
  std::string path_;
  std::string prefix_;
};

#define TS_ASSIGN(lhs, expr)          \
  do {                                \
    auto _v = (expr);                 \
    if (!_v.ok()) return _v.status(); \
    lhs = std::move(_v).value();      \
  } while (false)

struct ArchDefaults {
  const char* name;
  int32_t max_position_embeddings;
  double rms_norm_eps;
  bool qkv_bias;
};

// transformers' defaults for the fields a config.json may leave out.
const ArchDefaults kArchitectures[] = {
    {"LlamaForCausalLM", 2048, 1e-6, false},
    {"MistralForCausalLM", 4096 * 32, 1e-6, false},
    {"Qwen2ForCausalLM", 32768, 1e-6, true},
};

Status ParseRopeScaling(const FieldReader& top, const json& obj, ModelConfig& c) {
  if (!obj.is_object()) return top.Error("rope_scaling", "must be an object or null");
  const FieldReader r(obj, "");
  std::string type;
  {
    const json* t = r.Get("rope_type");
    if (t == nullptr) t = r.Get("type");
    if (t == nullptr) return top.Error("rope_scaling.rope_type", "is missing");
    if (!t->is_string()) return top.Error("rope_scaling.rope_type", "must be a string");
    type = t->get<std::string>();
  }
  auto factor = [&]() -> StatusOr<float> {
    const json* f = r.Get("factor");
    if (f == nullptr) return top.Error("rope_scaling.factor", "is missing");
    if (!f->is_number() || !(f->get<double>() > 0) ||
        f->get<double>() > std::numeric_limits<float>::max()) {
      return top.Error("rope_scaling.factor", "must be a positive number, got " + f->dump());
    }
    return static_cast<float>(f->get<double>());
  };
  RopeScaling& s = c.rope_scaling;
  if (type == "default") {
    s = RopeScaling{};
  } else if (type == "linear") {
    s.type = RopeScaling::Type::kLinear;
    TS_ASSIGN(s.factor, factor());
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::kLlama3;
    TS_ASSIGN(s.factor, factor());
    for (const char* f :
         {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!r.Has(f)) return top.Error(std::string("rope_scaling.") + f, "is missing");
    }
    double low = 0, high = 0;
    TS_ASSIGN(low, r.Number("low_freq_factor", 0));
    TS_ASSIGN(high, r.Number("high_freq_factor", 0));
    if (!(low > 0) || !(high > low)) {
      return top.Error("rope_scaling.high_freq_factor",
                       "must be greater than low_freq_factor > 0 (got " + std::to_string(high) +
                           " and " + std::to_string(low) + ")");
    }
    s.low_freq_factor = static_cast<float>(low);
    s.high_freq_factor = static_cast<float>(high);
    const json* old = r.Get("original_max_position_embeddings");
    if (!old->is_number_integer() || old->get<int64_t>() <= 0 ||
        old->get<int64_t>() > kMaxConfigDim) {
      return top.Error("rope_scaling.original_max_position_embeddings",
                       "must be a positive integer, got " + old->dump());
    }
    s.original_max_position_embeddings = old->get<int32_t>();
  } else {
    return top.Error("rope_scaling.rope_type",
                     "= \"" + type + "\" is not supported (default, linear and llama3 are)");
  }
  return Status::Ok();
}

// The double whose shortest decimal form is the float's (1e-5f is written 1e-05, not
// 9.999999747378752e-06); it reads back to the same float.
double ShortestDouble(float f) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), f);
  double d = 0;
  std::from_chars(buf, res.ptr, d);
  return d;
}

}  // namespace

StatusOr<HfConfig> ParseHfConfig(const std::string& text, const std::string& path) {
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return InvalidArgument(path + ": not a JSON object");
  }
  const FieldReader r(root, path);
  HfConfig out;
  ModelConfig& c = out.model;
  const ArchDefaults* arch = nullptr;
  {
    const json* a = r.Get("architectures");
    if (a == nullptr) return r.Error("architectures", "is missing");
    if (!a->is_array() || a->size() != 1 || !(*a)[0].is_string()) {
      return r.Error("architectures", "must be a list of one name, got " + a->dump());
    }
    out.architecture = (*a)[0].get<std::string>();
    for (const ArchDefaults& d : kArchitectures) {
      if (out.architecture == d.name) arch = &d;
    }
    if (arch == nullptr) {
      return r.Error("architectures", "= \"" + out.architecture +
                                          "\" is not supported (LlamaForCausalLM, "
                                          "MistralForCausalLM and Qwen2ForCausalLM are)");
    }
  }
  TS_ASSIGN(c.dim, r.Int("hidden_size"));
  TS_ASSIGN(c.num_layers, r.Int("num_hidden_layers"));
  TS_ASSIGN(c.num_heads, r.Int("num_attention_heads"));
  TS_ASSIGN(c.num_kv_heads, r.Int("num_key_value_heads", c.num_heads));
  TS_ASSIGN(c.hidden_dim, r.Int("intermediate_size"));
  TS_ASSIGN(c.vocab_size, r.Int("vocab_size"));
  if (c.num_heads > c.dim) {
    return r.Error("num_attention_heads",
                   "= " + std::to_string(c.num_heads) +
                       " is more than hidden_size = " + std::to_string(c.dim));
  }
  if (c.num_kv_heads > c.num_heads || c.num_heads % c.num_kv_heads != 0) {
    return r.Error("num_key_value_heads",
                   "= " + std::to_string(c.num_kv_heads) +
                       " does not divide num_attention_heads = " + std::to_string(c.num_heads));
  }
  if (r.Has("head_dim")) {
    TS_ASSIGN(c.head_dim, r.Int("head_dim"));
  } else {
    if (c.dim % c.num_heads != 0) {
      return r.Error("num_attention_heads", "= " + std::to_string(c.num_heads) +
                                                " does not divide hidden_size = " +
                                                std::to_string(c.dim) + " (and no head_dim)");
    }
    c.head_dim = c.dim / c.num_heads;
  }
  if (c.head_dim % 2 != 0) {
    return r.Error("head_dim", "= " + std::to_string(c.head_dim) + " is odd (RoPE needs pairs)");
  }
  TS_ASSIGN(c.max_seq_len, r.Int("max_position_embeddings", arch->max_position_embeddings));
  double eps = 0, theta = 0;
  TS_ASSIGN(eps, r.Number("rms_norm_eps", arch->rms_norm_eps));
  TS_ASSIGN(theta, r.Number("rope_theta", 10000.0));
  if (!(eps > 0)) return r.Error("rms_norm_eps", "must be positive");
  if (!(theta > 1)) return r.Error("rope_theta", "must be greater than 1");
  c.rms_norm_eps = static_cast<float>(eps);
  c.rope_theta = static_cast<float>(theta);
  c.rope_style = RopeStyle::kNeox;
  if (const json* s = r.Get("rope_scaling"); s != nullptr) {
    TS_RETURN_IF_ERROR(ParseRopeScaling(r, *s, c));
  }
  bool tie = false;
  TS_ASSIGN(tie, r.Bool("tie_word_embeddings", false));
  c.shared_classifier = tie;
  if (arch->qkv_bias) {
    c.attention_bias = true;
  } else {
    TS_ASSIGN(c.attention_bias, r.Bool("attention_bias", false));
  }
  bool mlp_bias = false;
  TS_ASSIGN(mlp_bias, r.Bool("mlp_bias", false));
  if (mlp_bias) return r.Error("mlp_bias", "= true is not supported");
  std::string act;
  TS_ASSIGN(act, r.String("hidden_act", "silu"));
  if (act != "silu") return r.Error("hidden_act", "= \"" + act + "\" is not supported (silu is)");
  double partial = 1.0;
  TS_ASSIGN(partial, r.Number("partial_rotary_factor", 1.0));
  if (partial != 1.0) return r.Error("partial_rotary_factor", "!= 1 is not supported");
  bool use_sliding = false;
  TS_ASSIGN(use_sliding, r.Bool("use_sliding_window", false));
  if (use_sliding) return r.Error("use_sliding_window", "= true is not supported");
  if (out.architecture == "MistralForCausalLM" && r.Has("sliding_window")) {
    int32_t window = 0;
    TS_ASSIGN(window, r.Int("sliding_window"));
    // Attention within the window is plain causal attention: cap the context there.
    c.max_seq_len = std::min(c.max_seq_len, window);
  }
  std::string dtype_name;
  TS_ASSIGN(dtype_name, r.String("torch_dtype", "float32"));
  const std::optional<TensorDtype> dtype = ParseTorchDtype(dtype_name);
  if (!dtype) {
    return r.Error("torch_dtype",
                   "= \"" + dtype_name + "\" is not supported (float32, float16, bfloat16 are)");
  }
  out.torch_dtype = *dtype;
  std::vector<int32_t> bos;
  TS_ASSIGN(bos, r.Ids("bos_token_id"));
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  TS_ASSIGN(c.stop_token_ids, r.Ids("eos_token_id"));
  for (int32_t id : bos) {
    if (id >= c.vocab_size) return r.Error("bos_token_id", "is outside the vocabulary");
  }
  for (int32_t id : c.stop_token_ids) {
    if (id >= c.vocab_size) return r.Error("eos_token_id", "is outside the vocabulary");
  }
  return out;
}

StatusOr<HfConfig> LoadHfConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseHfConfig(ss.str(), path);
}

std::string HfLayerName(int32_t layer, const char* rest) {
  return "model.layers." + std::to_string(layer) + "." + rest;
}

std::string HfConfigJson(const std::string& architecture, const ModelConfig& c, TensorDtype dtype) {
  nlohmann::ordered_json j;
  j["architectures"] = {architecture};
  j["model_type"] = architecture == "Qwen2ForCausalLM"     ? "qwen2"
                    : architecture == "MistralForCausalLM" ? "mistral"
                                                           : "llama";
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hidden_dim;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = ShortestDouble(c.rms_norm_eps);
  j["rope_theta"] = ShortestDouble(c.rope_theta);
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScaling::Type::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", ShortestDouble(s.factor)}};
  } else if (s.type == RopeScaling::Type::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", ShortestDouble(s.factor)},
                         {"low_freq_factor", ShortestDouble(s.low_freq_factor)},
                         {"high_freq_factor", ShortestDouble(s.high_freq_factor)},
                         {"original_max_position_embeddings", s.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.shared_classifier;
  if (architecture != "Qwen2ForCausalLM") j["attention_bias"] = c.attention_bias;
  j["vocab_size"] = c.vocab_size;
  j["torch_dtype"] = TorchDtypeName(dtype);
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.stop_token_ids.size() == 1) {
    j["eos_token_id"] = c.stop_token_ids[0];
  } else if (!c.stop_token_ids.empty()) {
    j["eos_token_id"] = c.stop_token_ids;
  }
  return j.dump(2) + "\n";
}

}  // namespace tinyserve
