#include "models/llama2c.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

namespace tinyserve {
namespace {

constexpr int64_t kHeaderBytes = 7 * sizeof(int32_t);
// Dimensions past this are not a real model; rejecting them keeps all size arithmetic in int64.
constexpr int32_t kMaxLlama2cDim = 1 << 20;

Status HeaderError(const std::string& path, const std::string& what) {
  return InvalidArgument(path + ": not a valid llama2.c checkpoint: " + what);
}

// Tensor element counts in file order (see ../shared/models/README.md).
std::vector<int64_t> TensorSizes(const Llama2cHeader& h) {
  const int64_t dim = h.dim, hidden = h.hidden_dim, L = h.n_layers;
  const int64_t head = dim / h.n_heads, kv_dim = head * h.n_kv_heads;
  const int64_t vocab = h.vocab_size < 0 ? -static_cast<int64_t>(h.vocab_size) : h.vocab_size;
  std::vector<int64_t> sizes = {
      vocab * dim,           // token_embedding_table
      L * dim,               // rms_att_weight
      L * dim * dim,         // wq
      L * kv_dim * dim,      // wk
      L * kv_dim * dim,      // wv
      L * dim * dim,         // wo
      L * dim,               // rms_ffn_weight
      L * hidden * dim,      // w1
      L * dim * hidden,      // w2
      L * hidden * dim,      // w3
      dim,                   // rms_final_weight
      h.seq_len * head / 2,  // freq_cis_real (unused)
      h.seq_len * head / 2,  // freq_cis_imag (unused)
  };
  if (h.vocab_size < 0) sizes.push_back(vocab * dim);  // wcls
  return sizes;
}

class FloatReader {
 public:
  FloatReader(std::ifstream& in, const std::string& path) : in_(in), path_(path) {}
  Status Read(float* dst, int64_t count) {
    in_.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(count * sizeof(float)));
    if (!in_) return InvalidArgument(path_ + ": read failed (file changed while loading?)");
    return Status::Ok();
  }
  Status Skip(int64_t count) {
    in_.seekg(static_cast<std::streamoff>(count * sizeof(float)), std::ios::cur);
    if (!in_) return InvalidArgument(path_ + ": seek failed");
    return Status::Ok();
  }

 private:
  std::ifstream& in_;
  const std::string& path_;
};

}  // namespace

StatusOr<int64_t> Llama2cExpectedFileSize(const Llama2cHeader& h, const std::string& path) {
  const std::pair<const char*, int32_t> positive[] = {
      {"dim", h.dim},         {"hidden_dim", h.hidden_dim}, {"n_layers", h.n_layers},
      {"n_heads", h.n_heads}, {"n_kv_heads", h.n_kv_heads}, {"seq_len", h.seq_len}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) {
      return HeaderError(path,
                         std::string(name) + " = " + std::to_string(value) + " (must be positive)");
    }
    if (value > kMaxLlama2cDim) {
      return HeaderError(
          path, std::string(name) + " = " + std::to_string(value) + " is implausibly large");
    }
  }
  if (h.vocab_size == 0) return HeaderError(path, "vocab_size = 0");
  if (h.vocab_size < -kMaxLlama2cDim || h.vocab_size > kMaxLlama2cDim) {
    return HeaderError(path,
                       "vocab_size = " + std::to_string(h.vocab_size) + " is implausibly large");
  }
  if (h.dim % h.n_heads != 0) {
    return HeaderError(path, "n_heads = " + std::to_string(h.n_heads) +
                                 " does not divide dim = " + std::to_string(h.dim));
  }
  if (h.n_kv_heads > h.n_heads || h.n_heads % h.n_kv_heads != 0) {
    return HeaderError(path, "n_kv_heads = " + std::to_string(h.n_kv_heads) +
                                 " does not divide n_heads = " + std::to_string(h.n_heads));
  }
  if ((h.dim / h.n_heads) % 2 != 0) {
    return HeaderError(
        path, "head size " + std::to_string(h.dim / h.n_heads) + " is odd (RoPE needs pairs)");
  }
  int64_t floats = 0;
  for (int64_t s : TensorSizes(h)) {
    if (__builtin_add_overflow(floats, s, &floats)) return HeaderError(path, "sizes overflow");
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(floats, static_cast<int64_t>(sizeof(float)), &bytes) ||
      __builtin_add_overflow(bytes, kHeaderBytes, &bytes)) {
    return HeaderError(path, "sizes overflow");
  }
  return bytes;
}

StatusOr<std::shared_ptr<const LlamaWeights>> LoadLlama2cCheckpoint(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFound(path + ": model file not found (or not a regular file)");
  }
  const int64_t file_size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec) return InvalidArgument(path + ": cannot read file size: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open model file");
  if (file_size < kHeaderBytes) {
    return HeaderError(
        path, "file is " + std::to_string(file_size) + " bytes, shorter than the 28-byte header");
  }
  int32_t raw[7];
  in.read(reinterpret_cast<char*>(raw), sizeof(raw));
  if (!in) return InvalidArgument(path + ": cannot read header");
  const Llama2cHeader h{raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6]};
  StatusOr<int64_t> expected = Llama2cExpectedFileSize(h, path);
  if (!expected.ok()) return expected.status();
  if (*expected != file_size) {
    return HeaderError(path, std::string(file_size < *expected ? "truncated" : "oversized") +
                                 ": file is " + std::to_string(file_size) +
                                 " bytes, the header implies " + std::to_string(*expected));
  }

  auto w = std::make_shared<LlamaWeights>();
  ModelConfig& c = w->config;
  c.name = std::filesystem::path(path).stem().string();
  c.dim = h.dim;
  c.hidden_dim = h.hidden_dim;
  c.num_layers = h.n_layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.vocab_size = h.vocab_size < 0 ? -h.vocab_size : h.vocab_size;
  c.max_seq_len = h.seq_len;
  c.shared_classifier = h.vocab_size > 0;
  c.bos_token_id = 1;
  c.stop_token_ids = {1};

  const int64_t dim = c.dim, hidden = c.hidden_dim, kv_dim = c.kv_dim(), L = c.num_layers;
  FloatReader r(in, path);
  w->token_embedding.resize(c.vocab_size * dim);
  TS_RETURN_IF_ERROR(r.Read(w->token_embedding.data(), c.vocab_size * dim));
  w->layers.resize(L);
  for (auto& layer : w->layers) {
    layer.attn_norm.resize(dim);
    layer.wqkv.resize((dim + 2 * kv_dim) * dim);
    layer.wo.resize(dim * dim);
    layer.ffn_norm.resize(dim);
    layer.w13.resize(2 * hidden * dim);
    layer.w2.resize(dim * hidden);
  }
  // Each tensor is stored for all layers in a row; scatter into per-layer (fused) buffers.
  for (auto& l : w->layers) TS_RETURN_IF_ERROR(r.Read(l.attn_norm.data(), dim));
  for (auto& l : w->layers) TS_RETURN_IF_ERROR(r.Read(l.wqkv.data(), dim * dim));
  for (auto& l : w->layers) TS_RETURN_IF_ERROR(r.Read(l.wqkv.data() + dim * dim, kv_dim * dim));
  for (auto& l : w->layers) {
    TS_RETURN_IF_ERROR(r.Read(l.wqkv.data() + (dim + kv_dim) * dim, kv_dim * dim));
  }
  for (auto& l : w->layers) TS_RETURN_IF_ERROR(r.Read(l.wo.data(), dim * dim));
  for (auto& l : w->layers) TS_RETURN_IF_ERROR(r.Read(l.ffn_norm.data(), dim));
  for (auto& l : w->layers) TS_RETURN_IF_ERROR(r.Read(l.w13.data(), hidden * dim));
  for (auto& l : w->layers) TS_RETURN_IF_ERROR(r.Read(l.w2.data(), dim * hidden));
  for (auto& l : w->layers) TS_RETURN_IF_ERROR(r.Read(l.w13.data() + hidden * dim, hidden * dim));
  w->final_norm.resize(dim);
  TS_RETURN_IF_ERROR(r.Read(w->final_norm.data(), dim));
  TS_RETURN_IF_ERROR(r.Skip(static_cast<int64_t>(c.max_seq_len) * c.head_dim));  // freq_cis
  if (!c.shared_classifier) {
    w->classifier.resize(c.vocab_size * dim);
    TS_RETURN_IF_ERROR(r.Read(w->classifier.data(), c.vocab_size * dim));
  }
  return std::shared_ptr<const LlamaWeights>(std::move(w));
}

Status WriteRandomLlama2cCheckpoint(const std::string& path, const Llama2cHeader& header,
                                    uint64_t seed, float scale) {
  StatusOr<int64_t> expected = Llama2cExpectedFileSize(header, path);
  if (!expected.ok()) return expected.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument(path + ": cannot open for writing");
  out.write(reinterpret_cast<const char*>(&header), sizeof(header));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-scale, scale);
  const std::vector<int64_t> sizes = TensorSizes(header);
  // Norm weights (tensors 1, 6, 10) are ones so activations keep a sane scale.
  std::vector<float> chunk;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool is_norm = i == 1 || i == 6 || i == 10;
    for (int64_t done = 0; done < sizes[i];) {
      const int64_t n = std::min<int64_t>(sizes[i] - done, 1 << 20);
      chunk.resize(n);
      for (auto& v : chunk) v = is_norm ? 1.0f : uni(rng);
      out.write(reinterpret_cast<const char*>(chunk.data()),
                static_cast<std::streamsize>(n * sizeof(float)));
      done += n;
    }
  }
  out.close();
  if (!out) return InvalidArgument(path + ": write failed (disk full?)");
  return Status::Ok();
}

}  // namespace tinyserve
