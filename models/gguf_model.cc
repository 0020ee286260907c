#include "models/gguf_model.h"

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "kernels/ggml_quant.h"

#include "models/hf_model.h"
#include "models/safetensors.h"
#include "models/tokenizer/gguf.h"
#include "models/tokenizer/gguf_tokenizer.h"
#include "models/tokenizer/llama2c_tokenizer.h"
#include "models/tokenizer/sentencepiece_bpe.h"

namespace tinyserve {
namespace {

constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlBf16 = 30;
constexpr uint64_t kAlignment = 32;

std::optional<TensorDtype> DtypeOfGgml(uint32_t type) {
  if (type == kGgmlF32) return TensorDtype::kF32;
  if (type == kGgmlF16) return TensorDtype::kF16;
  if (type == kGgmlBf16) return TensorDtype::kBF16;
  return std::nullopt;
}

uint32_t Ggml(QuantType t) { return static_cast<uint32_t>(t); }

// llama-quantize's use_more_bits: the first and last eighth of the layers, and every third one
// between.
bool UseMoreBits(int32_t i, int32_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// llama-quantize's fallback for a matrix of `cols` columns that type `t` cannot block.
uint32_t WithFallback(uint32_t t, uint64_t cols) {
  const std::optional<QuantType> q = QuantTypeOfGgml(t);
  if (!q || cols % QuantBlockElements(*q) == 0) return t;
  const uint32_t fallback = *q == QuantType::kQ4_K   ? Ggml(QuantType::kQ5_0)
                            : *q == QuantType::kQ5_K ? Ggml(QuantType::kQ5_1)
                            : *q == QuantType::kQ6_K ? Ggml(QuantType::kQ8_0)
                                                     : kGgmlF16;
  const std::optional<QuantType> f = QuantTypeOfGgml(fallback);
  return f && cols % QuantBlockElements(*f) != 0 ? kGgmlF16 : fallback;
}

// The ggml type of matrix `name` (of layer `layer` of `num_layers`; -1: not a layer's) with
// `cols` columns, as llama-quantize chooses it for `type` (gguf_model.h).
uint32_t MatrixType(GgufWeightType type, const std::string& name, bool is_output, int32_t layer,
                    int32_t num_layers, uint64_t cols) {
  uint32_t base = 0;
  switch (type) {
    case GgufWeightType::kF32:
      return kGgmlF32;
    case GgufWeightType::kF16:
      return kGgmlF16;
    case GgufWeightType::kBF16:
      return kGgmlBf16;
    case GgufWeightType::kQ8_0:
      base = Ggml(QuantType::kQ8_0);
      break;
    case GgufWeightType::kQ4_0:
      base = Ggml(QuantType::kQ4_0);
      break;
    case GgufWeightType::kQ4_K:
    case GgufWeightType::kQ4_K_M:
      base = Ggml(QuantType::kQ4_K);
      break;
    case GgufWeightType::kQ5_K:
      base = Ggml(QuantType::kQ5_K);
      break;
    case GgufWeightType::kQ6_K:
      base = Ggml(QuantType::kQ6_K);
      break;
  }
  const bool pure = type == GgufWeightType::kQ4_K || type == GgufWeightType::kQ5_K ||
                    type == GgufWeightType::kQ6_K;
  if (!pure && is_output) {
    if (cols % QuantBlockElements(*QuantTypeOfGgml(base)) != 0) return Ggml(QuantType::kQ8_0);
    if (base != Ggml(QuantType::kQ8_0)) base = Ggml(QuantType::kQ6_K);
  } else if (type == GgufWeightType::kQ4_K_M && layer >= 0 &&
             (name.find("attn_v.weight") != std::string::npos ||
              name.find("ffn_down.weight") != std::string::npos) &&
             UseMoreBits(layer, num_layers)) {
    base = Ggml(QuantType::kQ6_K);
  }
  return WithFallback(base, cols);
}

uint32_t FileTypeOf(GgufWeightType type) {  // llama_ftype
  switch (type) {
    case GgufWeightType::kF32:
      return 0;
    case GgufWeightType::kF16:
      return 1;
    case GgufWeightType::kBF16:
      return 32;
    case GgufWeightType::kQ8_0:
      return 7;
    case GgufWeightType::kQ4_0:
      return 2;
    case GgufWeightType::kQ4_K:
      return 14;  // Q4_K_S, the nearest
    case GgufWeightType::kQ5_K:
      return 16;  // Q5_K_S
    case GgufWeightType::kQ6_K:
      return 18;
    case GgufWeightType::kQ4_K_M:
      return 15;
  }
  return 0;
}

uint64_t TensorBytes(uint32_t ggml_type, const std::vector<uint64_t>& dims) {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  if (const std::optional<QuantType> q = QuantTypeOfGgml(ggml_type)) {
    return QuantRowBytes(*q, static_cast<int64_t>(dims[0])) * (n / dims[0]);
  }
  return n * (ggml_type == kGgmlF32 ? 4 : 2);
}

// Writes the floats at src (rows of dims[0]) as ggml_type to dst.
void EncodeTensor(uint32_t ggml_type, const float* src, const std::vector<uint64_t>& dims,
                  uint8_t* dst) {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  if (const std::optional<QuantType> q = QuantTypeOfGgml(ggml_type)) {
    const int64_t cols = static_cast<int64_t>(dims[0]);
    const size_t row_bytes = QuantRowBytes(*q, cols);
    for (uint64_t r = 0; r < n / dims[0]; ++r) {
      QuantizeRowReference(*q, src + r * cols, cols, dst + r * row_bytes);
    }
    return;
  }
  const TensorDtype d = ggml_type == kGgmlF32   ? TensorDtype::kF32
                        : ggml_type == kGgmlF16 ? TensorDtype::kF16
                                                : TensorDtype::kBF16;
  ConvertFromF32(d, src, static_cast<int64_t>(n), dst);
}

std::string Blk(int32_t l, const char* rest) { return "blk." + std::to_string(l) + "." + rest; }

// A metadata integer that must be positive; `fallback` (when >= 0) if the key is missing.
Status ReadDim(const GgufFile& g, const std::string& key, int64_t fallback, int32_t* out) {
  if (!g.Has(key) && fallback >= 0) {
    *out = static_cast<int32_t>(fallback);
    return Status::Ok();
  }
  StatusOr<uint64_t> v = g.GetUint(key);
  if (!v.ok()) return InvalidArgument(g.path() + ": " + key + ": " + v.status().message());
  if (*v == 0 || *v > (1u << 24)) {
    return InvalidArgument(g.path() + ": " + key + " = " + std::to_string(*v) + " is out of range");
  }
  *out = static_cast<int32_t>(*v);
  return Status::Ok();
}

Status ReadFloat(const GgufFile& g, const std::string& key, double fallback, float* out) {
  if (!g.Has(key)) {
    *out = static_cast<float>(fallback);
    return Status::Ok();
  }
  StatusOr<double> v = g.GetFloat(key);
  if (!v.ok()) return InvalidArgument(g.path() + ": " + key + ": " + v.status().message());
  if (!(*v > 0) || *v > std::numeric_limits<float>::max()) {
    return InvalidArgument(g.path() + ": " + key + " = " + std::to_string(*v) +
                           " is not a positive float32");
  }
  *out = static_cast<float>(*v);
  return Status::Ok();
}

struct ExpectedGgufTensor {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order
  std::vector<float>* vec;     // the fp32 tensor it goes to (at `offset`), or its matrix
  uint64_t offset;
  QuantizedMatrix* quantized;  // a matrix's quantized form; null for 1-D tensors (always float)
};

// Little-endian GGUF bytes.
class Bytes {
 public:
  template <typename T>
  void Raw(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  void Str(const std::string& s) {
    Raw<uint64_t>(s.size());
    out += s;
  }
  void Key(const std::string& k, GgufType t) {
    Str(k);
    Raw(static_cast<uint32_t>(t));
  }
  std::string out;
};

}  // namespace

bool IsGgufFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in && std::memcmp(magic, "GGUF", 4) == 0;
}

StatusOr<GgufModel> LoadGgufModel(const std::string& path) {
  StatusOr<GgufFile> opened = GgufFile::Open(path);
  if (!opened.ok()) return opened.status();
  const GgufFile& g = *opened;
  StatusOr<std::string> arch = g.GetString("general.architecture");
  if (!arch.ok())
    return InvalidArgument(path + ": general.architecture: " + arch.status().message());
  if (*arch != "llama") {
    return InvalidArgument(path + ": general.architecture = \"" + *arch +
                           "\" is not supported (llama is)");
  }
  auto w = std::make_shared<LlamaWeights>();
  ModelConfig& c = w->config;
  c.name = std::filesystem::path(path).stem().string();
  TS_RETURN_IF_ERROR(ReadDim(g, "llama.embedding_length", -1, &c.dim));
  TS_RETURN_IF_ERROR(ReadDim(g, "llama.block_count", -1, &c.num_layers));
  TS_RETURN_IF_ERROR(ReadDim(g, "llama.feed_forward_length", -1, &c.hidden_dim));
  TS_RETURN_IF_ERROR(ReadDim(g, "llama.attention.head_count", -1, &c.num_heads));
  TS_RETURN_IF_ERROR(ReadDim(g, "llama.attention.head_count_kv", c.num_heads, &c.num_kv_heads));
  TS_RETURN_IF_ERROR(ReadDim(g, "llama.context_length", -1, &c.max_seq_len));
  if (c.num_kv_heads > c.num_heads || c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument(path +
                           ": llama.attention.head_count_kv = " + std::to_string(c.num_kv_heads) +
                           " does not divide head_count = " + std::to_string(c.num_heads));
  }
  if (!g.Has("llama.attention.key_length") && c.dim % c.num_heads != 0) {
    return InvalidArgument(path + ": llama.attention.head_count does not divide embedding_length");
  }
  TS_RETURN_IF_ERROR(ReadDim(g, "llama.attention.key_length", c.dim / c.num_heads, &c.head_dim));
  if (c.head_dim % 2 != 0) return InvalidArgument(path + ": the head dim is odd");
  int32_t rope_dims = 0;
  TS_RETURN_IF_ERROR(ReadDim(g, "llama.rope.dimension_count", c.head_dim, &rope_dims));
  if (rope_dims != c.head_dim) {
    return InvalidArgument(path + ": llama.rope.dimension_count = " + std::to_string(rope_dims) +
                           " (partial rotary) is not supported; the head dim is " +
                           std::to_string(c.head_dim));
  }
  TS_RETURN_IF_ERROR(ReadFloat(g, "llama.attention.layer_norm_rms_epsilon", 1e-5, &c.rms_norm_eps));
  TS_RETURN_IF_ERROR(ReadFloat(g, "llama.rope.freq_base", 10000.0, &c.rope_theta));
  if (g.Has("llama.rope.scaling.type")) {
    StatusOr<std::string> type = g.GetString("llama.rope.scaling.type");
    if (!type.ok()) return type.status();
    if (*type == "linear") {
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      TS_RETURN_IF_ERROR(ReadFloat(g, "llama.rope.scaling.factor", 1.0, &c.rope_scaling.factor));
    } else if (*type != "none") {
      return InvalidArgument(path + ": llama.rope.scaling.type = \"" + *type +
                             "\" is not supported (none and linear are)");
    }
  }
  c.rope_style = RopeStyle::kInterleaved;

  const GgufTensorInfo* embd = g.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2) {
    return InvalidArgument(path + ": token_embd.weight is missing or not a matrix");
  }
  if (embd->dims[1] == 0 || embd->dims[1] > (1u << 24)) {
    return InvalidArgument(path + ": token_embd.weight has an implausible vocabulary size");
  }
  c.vocab_size = static_cast<int32_t>(embd->dims[1]);
  c.shared_classifier = g.FindTensor("output.weight") == nullptr;
  c.attention_bias = g.FindTensor("blk.0.attn_q.bias") != nullptr;

  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadGgufTokenizer(g);
  if (!tokenizer.ok()) return tokenizer.status();
  if ((*tokenizer)->vocab_size() != c.vocab_size) {
    return InvalidArgument(path + ": the tokenizer has " +
                           std::to_string((*tokenizer)->vocab_size()) +
                           " tokens, token_embd.weight " + std::to_string(c.vocab_size));
  }
  c.bos_token_id = (*tokenizer)->bos_id();
  c.stop_token_ids.clear();
  if ((*tokenizer)->eos_id() >= 0) c.stop_token_ids.push_back((*tokenizer)->eos_id());
  if (g.Has("tokenizer.ggml.eot_token_id")) {
    StatusOr<uint64_t> eot = g.GetUint("tokenizer.ggml.eot_token_id");
    if (eot.ok() && *eot < static_cast<uint64_t>(c.vocab_size) &&
        static_cast<int32_t>(*eot) != (*tokenizer)->eos_id()) {
      c.stop_token_ids.push_back(static_cast<int32_t>(*eot));
    }
  }

  const uint64_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), hid = c.hidden_dim;
  const uint64_t vocab = c.vocab_size;
  // A matrix whose parts are all quantized (q|k|v, gate|up) keeps its blocks; its fp32 vector is
  // never allocated. A matrix that mixes float and quantized parts is dequantized to fp32 whole.
  auto all_quantized = [&](std::initializer_list<std::string> names) {
    for (const std::string& n : names) {
      const GgufTensorInfo* t = g.FindTensor(n);
      if (t == nullptr || !QuantTypeOfGgml(t->ggml_type)) return false;
    }
    return true;
  };
  auto sized = [](std::vector<float>& v, uint64_t n, bool quantized) {
    if (!quantized) v.resize(n);
  };
  sized(w->token_embedding, vocab * dim, all_quantized({"token_embd.weight"}));
  w->final_norm.resize(dim);
  w->layers.resize(c.num_layers);
  std::vector<ExpectedGgufTensor> expected = {
      {"token_embd.weight", {dim, vocab}, &w->token_embedding, 0, &w->q_token_embedding},
      {"output_norm.weight", {dim}, &w->final_norm, 0, nullptr}};
  if (!c.shared_classifier) {
    sized(w->classifier, vocab * dim, all_quantized({"output.weight"}));
    expected.push_back({"output.weight", {dim, vocab}, &w->classifier, 0, &w->q_classifier});
  }
  if (g.FindTensor("rope_freqs.weight") != nullptr) {
    c.rope_freq_factors.resize(c.head_dim / 2);
    expected.push_back({"rope_freqs.weight",
                        {static_cast<uint64_t>(c.head_dim / 2)},
                        &c.rope_freq_factors,
                        0,
                        nullptr});
  }
  for (int32_t l = 0; l < c.num_layers; ++l) {
    LlamaLayerWeights& L = w->layers[l];
    L.attn_norm.resize(dim);
    sized(
        L.wqkv, (q + 2 * kv) * dim,
        all_quantized({Blk(l, "attn_q.weight"), Blk(l, "attn_k.weight"), Blk(l, "attn_v.weight")}));
    sized(L.wo, dim * q, all_quantized({Blk(l, "attn_output.weight")}));
    L.ffn_norm.resize(dim);
    sized(L.w13, 2 * hid * dim,
          all_quantized({Blk(l, "ffn_gate.weight"), Blk(l, "ffn_up.weight")}));
    sized(L.w2, dim * hid, all_quantized({Blk(l, "ffn_down.weight")}));
    expected.push_back({Blk(l, "attn_norm.weight"), {dim}, &L.attn_norm, 0, nullptr});
    expected.push_back({Blk(l, "attn_q.weight"), {dim, q}, &L.wqkv, 0, &L.q_wqkv});
    expected.push_back({Blk(l, "attn_k.weight"), {dim, kv}, &L.wqkv, q * dim, &L.q_wqkv});
    expected.push_back({Blk(l, "attn_v.weight"), {dim, kv}, &L.wqkv, (q + kv) * dim, &L.q_wqkv});
    if (c.attention_bias) {
      L.bqkv.resize(q + 2 * kv);
      expected.push_back({Blk(l, "attn_q.bias"), {q}, &L.bqkv, 0, nullptr});
      expected.push_back({Blk(l, "attn_k.bias"), {kv}, &L.bqkv, q, nullptr});
      expected.push_back({Blk(l, "attn_v.bias"), {kv}, &L.bqkv, q + kv, nullptr});
    }
    expected.push_back({Blk(l, "attn_output.weight"), {q, dim}, &L.wo, 0, &L.q_wo});
    expected.push_back({Blk(l, "ffn_norm.weight"), {dim}, &L.ffn_norm, 0, nullptr});
    expected.push_back({Blk(l, "ffn_gate.weight"), {dim, hid}, &L.w13, 0, &L.q_w13});
    expected.push_back({Blk(l, "ffn_up.weight"), {dim, hid}, &L.w13, hid * dim, &L.q_w13});
    expected.push_back({Blk(l, "ffn_down.weight"), {hid, dim}, &L.w2, 0, &L.q_w2});
  }
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  auto dims_string = [](const std::vector<uint64_t>& d) {
    std::vector<int64_t> s(d.begin(), d.end());
    return ShapeString(s);
  };
  for (const ExpectedGgufTensor& e : expected) {
    wanted.insert(e.name);
    const GgufTensorInfo* t = g.FindTensor(e.name);
    if (t == nullptr) {
      problems.push_back("missing " + e.name);
    } else if (t->dims != e.dims) {
      problems.push_back(e.name + " has dims " + dims_string(t->dims) + ", the metadata implies " +
                         dims_string(e.dims));
    } else if (!DtypeOfGgml(t->ggml_type)) {
      const std::optional<QuantType> qt = QuantTypeOfGgml(t->ggml_type);
      if (!qt) {
        problems.push_back(e.name + " has type " + GgmlTypeName(t->ggml_type) +
                           " (supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, "
                           "q6_K)");
      } else if (e.quantized == nullptr) {
        problems.push_back(e.name + " has type " + GgmlTypeName(t->ggml_type) +
                           " (a 1-D tensor must be f32, f16 or bf16)");
      } else if (t->dims[0] % QuantBlockElements(*qt) != 0) {
        problems.push_back(e.name + " has " + std::to_string(t->dims[0]) + " columns, not a " +
                           "multiple of the " + GgmlTypeName(t->ggml_type) + " block");
      }
    }
  }
  for (const GgufTensorInfo& t : g.tensors()) {
    if (wanted.count(t.name) == 0) problems.push_back("extra " + t.name);
  }
  if (!problems.empty()) {
    std::string msg = path + ": the tensors do not match the llama metadata: ";
    const size_t shown = std::min<size_t>(problems.size(), 12);
    for (size_t i = 0; i < shown; ++i) msg += (i > 0 ? "; " : "") + problems[i];
    if (problems.size() > shown)
      msg += "; and " + std::to_string(problems.size() - shown) + " more";
    return InvalidArgument(msg);
  }
  for (const ExpectedGgufTensor& e : expected) {
    const GgufTensorInfo* t = g.FindTensor(e.name);
    const uint8_t* data = g.tensor_data(*t);
    const std::optional<QuantType> qt = QuantTypeOfGgml(t->ggml_type);
    if (qt && e.vec->empty()) {  // a matrix all of whose parts are quantized
      e.quantized->parts.push_back({*qt, data, static_cast<int32_t>(t->dims[1])});
      continue;
    }
    float* dst = e.vec->data() + e.offset;
    if (!qt) {
      ConvertToF32(*DtypeOfGgml(t->ggml_type), data, static_cast<int64_t>(t->num_elements), dst);
      continue;
    }
    const int64_t cols = static_cast<int64_t>(t->dims[0]);
    for (uint64_t r = 0; r < t->dims[1]; ++r) {
      DequantizeRow(*qt, data + QuantRowBytes(*qt, cols) * r, cols, dst + r * cols);
    }
  }
  GgufModel out;
  if (g.Has("tokenizer.chat_template")) {
    StatusOr<std::string> tmpl = g.GetString("tokenizer.chat_template");
    if (!tmpl.ok()) return tmpl.status();
    out.chat_template = *tmpl;
  }
  if (w->is_quantized()) {
    // The blocks are read where they lie: the mapping moves with the file, its address stays.
    w->storage = std::make_shared<GgufFile>(std::move(*opened));
  }
  out.weights = std::move(w);
  out.tokenizer = std::move(tokenizer).value();
  return out;
}

StatusOr<GgufLlamaVocab> Llama2cVocabForGguf(const std::string& path, int32_t vocab_size) {
  StatusOr<SentencePieceVocab> sp = ReadLlama2cVocab(path, vocab_size);
  if (!sp.ok()) return sp.status();
  GgufLlamaVocab v;
  for (const std::string& piece : sp->pieces) {
    std::string spm;
    for (char ch : piece) spm += ch == ' ' ? std::string("\xe2\x96\x81") : std::string(1, ch);
    v.pieces.push_back(std::move(spm));
  }
  v.scores = sp->scores;
  for (TokenKind k : sp->kinds) v.token_types.push_back(static_cast<int32_t>(k));
  v.bos_id = sp->bos_id;
  v.eos_id = sp->eos_id;
  v.unk_id = sp->unk_id;
  v.add_bos = sp->add_bos_by_default;
  return v;
}

std::optional<GgufWeightType> ParseGgufWeightType(std::string_view name) {
  std::string s(name);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s == "f32" || s == "float32") return GgufWeightType::kF32;
  if (s == "f16" || s == "float16") return GgufWeightType::kF16;
  if (s == "bf16" || s == "bfloat16") return GgufWeightType::kBF16;
  if (s == "q8_0") return GgufWeightType::kQ8_0;
  if (s == "q4_0") return GgufWeightType::kQ4_0;
  if (s == "q4_k") return GgufWeightType::kQ4_K;
  if (s == "q5_k") return GgufWeightType::kQ5_K;
  if (s == "q6_k") return GgufWeightType::kQ6_K;
  if (s == "q4_k_m") return GgufWeightType::kQ4_K_M;
  return std::nullopt;
}

Status WriteGgufModel(const LlamaWeights& weights, const GgufLlamaVocab& vocab, TensorDtype dtype,
                      const std::string& path) {
  return WriteGgufModel(weights, vocab,
                        dtype == TensorDtype::kF32   ? GgufWeightType::kF32
                        : dtype == TensorDtype::kF16 ? GgufWeightType::kF16
                                                     : GgufWeightType::kBF16,
                        path);
}

Status WriteGgufModel(const LlamaWeights& weights, const GgufLlamaVocab& vocab, GgufWeightType type,
                      const std::string& path) {
  if (weights.is_quantized()) {
    return InvalidArgument(path + ": the weights were loaded quantized; write from fp32 weights");
  }

  const ModelConfig& c = weights.config;
  if (vocab.pieces.size() != static_cast<size_t>(c.vocab_size)) {
    return InvalidArgument(path + ": the vocabulary has " + std::to_string(vocab.pieces.size()) +
                           " tokens, the model " + std::to_string(c.vocab_size));
  }
  const uint64_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), hid = c.hidden_dim;
  const uint64_t nvocab = c.vocab_size;
  // Half-split rows (HF) go back to the interleaved order: invert the convert script's permute.
  const bool unpermute = c.rope_style == RopeStyle::kNeox;
  std::vector<std::vector<float>> keep;
  keep.reserve(4 * c.num_layers);
  auto interleaved = [&](const float* src, int32_t heads, uint64_t width) {
    if (!unpermute) return src;
    const std::vector<int32_t> from = InterleavedToHalfSplitRows(heads, c.head_dim);
    std::vector<float> out(from.size() * width);
    for (size_t r = 0; r < from.size(); ++r) {  // half-split row r came from interleaved from[r]
      std::copy(src + r * width, src + (r + 1) * width, out.begin() + from[r] * width);
    }
    keep.push_back(std::move(out));
    return static_cast<const float*>(keep.back().data());
  };
  struct Out {
    std::string name;
    std::vector<uint64_t> dims;
    const float* data;
    int32_t layer = -1;
  };
  std::vector<Out> tensors = {{"token_embd.weight", {dim, nvocab}, weights.token_embedding.data()},
                              {"output_norm.weight", {dim}, weights.final_norm.data()}};
  if (!c.shared_classifier)
    tensors.push_back({"output.weight", {dim, nvocab}, weights.classifier.data()});
  // Llama-3 RoPE scaling travels as llama.cpp's converter writes it: per-pair divisors of the
  // unscaled frequencies (rope_freqs.weight), no scaling keys.
  std::vector<float> freq_factors = c.rope_freq_factors;
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    ModelConfig plain = c;
    plain.rope_scaling = RopeScaling{};
    plain.rope_freq_factors.clear();
    const std::vector<float> base = plain.RopeInvFreq();
    const std::vector<float> scaled = c.RopeInvFreq();  // includes any rope_freq_factors
    freq_factors.resize(base.size());
    for (size_t i = 0; i < base.size(); ++i) freq_factors[i] = base[i] / scaled[i];
  }
  if (!freq_factors.empty()) {
    tensors.push_back(
        {"rope_freqs.weight", {static_cast<uint64_t>(c.head_dim / 2)}, freq_factors.data()});
  }
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LlamaLayerWeights& L = weights.layers[l];
    tensors.push_back({Blk(l, "attn_norm.weight"), {dim}, L.attn_norm.data()});
    tensors.push_back(
        {Blk(l, "attn_q.weight"), {dim, q}, interleaved(L.wqkv.data(), c.num_heads, dim)});
    tensors.push_back({Blk(l, "attn_k.weight"),
                       {dim, kv},
                       interleaved(L.wqkv.data() + q * dim, c.num_kv_heads, dim)});
    tensors.push_back({Blk(l, "attn_v.weight"), {dim, kv}, L.wqkv.data() + (q + kv) * dim, l});
    if (!L.bqkv.empty()) {
      tensors.push_back({Blk(l, "attn_q.bias"), {q}, interleaved(L.bqkv.data(), c.num_heads, 1)});
      tensors.push_back(
          {Blk(l, "attn_k.bias"), {kv}, interleaved(L.bqkv.data() + q, c.num_kv_heads, 1)});
      tensors.push_back({Blk(l, "attn_v.bias"), {kv}, L.bqkv.data() + q + kv});
    }
    tensors.push_back({Blk(l, "attn_output.weight"), {q, dim}, L.wo.data()});
    tensors.push_back({Blk(l, "ffn_norm.weight"), {dim}, L.ffn_norm.data()});
    tensors.push_back({Blk(l, "ffn_gate.weight"), {dim, hid}, L.w13.data()});
    tensors.push_back({Blk(l, "ffn_up.weight"), {dim, hid}, L.w13.data() + hid * dim});
    tensors.push_back({Blk(l, "ffn_down.weight"), {hid, dim}, L.w2.data(), l});
  }

  Bytes b;
  auto u32 = [&](const std::string& k, uint32_t v) {
    b.Key(k, GgufType::kUint32);
    b.Raw(v);
  };
  auto f32 = [&](const std::string& k, float v) {
    b.Key(k, GgufType::kFloat32);
    b.Raw(v);
  };
  auto str = [&](const std::string& k, const std::string& v) {
    b.Key(k, GgufType::kString);
    b.Str(v);
  };
  const bool linear = c.rope_scaling.type == RopeScaling::Type::kLinear;
  const uint64_t num_kv = 14 + (linear ? 2 : 0) + 8;
  b.out = "GGUF";
  b.Raw<uint32_t>(3);
  b.Raw<uint64_t>(tensors.size());
  b.Raw<uint64_t>(num_kv);
  str("general.architecture", "llama");
  str("general.name", c.name);
  u32("general.alignment", kAlignment);
  u32("general.file_type", FileTypeOf(type));
  u32("llama.context_length", c.max_seq_len);
  u32("llama.embedding_length", c.dim);
  u32("llama.block_count", c.num_layers);
  u32("llama.feed_forward_length", c.hidden_dim);
  u32("llama.attention.head_count", c.num_heads);
  u32("llama.attention.head_count_kv", c.num_kv_heads);
  u32("llama.attention.key_length", c.head_dim);
  u32("llama.rope.dimension_count", c.head_dim);
  f32("llama.attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  f32("llama.rope.freq_base", c.rope_theta);
  if (linear) {
    str("llama.rope.scaling.type", "linear");
    f32("llama.rope.scaling.factor", c.rope_scaling.factor);
  }
  str("tokenizer.ggml.model", "llama");
  b.Key("tokenizer.ggml.tokens", GgufType::kArray);
  b.Raw(static_cast<uint32_t>(GgufType::kString));
  b.Raw<uint64_t>(vocab.pieces.size());
  for (const std::string& p : vocab.pieces) b.Str(p);
  b.Key("tokenizer.ggml.scores", GgufType::kArray);
  b.Raw(static_cast<uint32_t>(GgufType::kFloat32));
  b.Raw<uint64_t>(vocab.scores.size());
  for (float s : vocab.scores) b.Raw(s);
  b.Key("tokenizer.ggml.token_type", GgufType::kArray);
  b.Raw(static_cast<uint32_t>(GgufType::kInt32));
  b.Raw<uint64_t>(vocab.token_types.size());
  for (int32_t t : vocab.token_types) b.Raw(t);
  u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.bos_id));
  u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.eos_id));
  u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(vocab.unk_id));
  b.Key("tokenizer.ggml.add_bos_token", GgufType::kBool);
  b.Raw<uint8_t>(vocab.add_bos ? 1 : 0);

  // As llama.cpp's converter does, 1-D tensors (norm weights, biases) stay F32 whatever `type`
  // is: ggml's element-wise ops take no f16/bf16 second operand, so llama.cpp refuses them.
  auto type_of = [&](const Out& t) {
    if (t.dims.size() == 1) return kGgmlF32;
    const bool is_output =
        t.name == "output.weight" || (c.shared_classifier && t.name == "token_embd.weight");
    return MatrixType(type, t.name, is_output, t.layer, c.num_layers, t.dims[0]);
  };
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  std::vector<uint32_t> types;
  for (const Out& t : tensors) {
    b.Str(t.name);
    b.Raw<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) b.Raw(d);
    types.push_back(type_of(t));
    b.Raw(types.back());
    b.Raw(offset);
    offsets.push_back(offset);
    offset += (TensorBytes(types.back(), t.dims) + kAlignment - 1) / kAlignment * kAlignment;
  }
  b.out.append((kAlignment - b.out.size() % kAlignment) % kAlignment, '\0');
  const size_t data_start = b.out.size();
  b.out.resize(data_start + offset, '\0');
  for (size_t i = 0; i < tensors.size(); ++i) {
    EncodeTensor(types[i], tensors[i].data, tensors[i].dims,
                 reinterpret_cast<uint8_t*>(b.out.data()) + data_start + offsets[i]);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument(path + ": cannot open for writing");
  out.write(b.out.data(), static_cast<std::streamsize>(b.out.size()));
  out.close();
  if (!out) return InvalidArgument(path + ": write failed");
  return Status::Ok();
}

}  // namespace tinyserve
