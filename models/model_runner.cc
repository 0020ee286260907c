#include "models/model_runner.h"

#include <string>

namespace tinyserve {

int64_t ModelRunner::KvBytesPerToken(const ModelConfig& c) {
  return 2 * static_cast<int64_t>(c.num_layers) * c.kv_dim() * static_cast<int64_t>(sizeof(float));
}

ModelRunner::ModelRunner(std::shared_ptr<const LlamaWeights> weights,
                         std::unique_ptr<Backend> backend, const ModelRunnerOptions& options)
    : config_(weights->config),
      weights_(std::move(weights)),
      backend_(std::move(backend)),
      options_(options) {}

ModelRunner::~ModelRunner() {
  // Buffers must go before the backend that allocated them.
  x_ = {}, xb_ = {}, qkv_ = {}, att_ = {}, delta_ = {}, gate_up_ = {}, hidden_ = {};
  sampled_x_ = {}, logits_ = {}, d_tokens_ = {}, d_positions_ = {}, d_slots_ = {};
  d_query_start_ = {}, d_block_tables_ = {}, d_sample_rows_ = {}, kv_cache_ = {};
  weight_buffers_.clear();
}

StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    std::shared_ptr<const LlamaWeights> weights, std::unique_ptr<Backend> backend,
    const ModelRunnerOptions& options) {
  if (weights == nullptr || backend == nullptr) return InvalidArgument("ModelRunner: null input");
  if (options.block_size <= 0) {
    return InvalidArgument("block size must be positive, got " +
                           std::to_string(options.block_size));
  }
  if (options.num_kv_blocks <= 0) {
    return InvalidArgument("number of KV blocks must be positive, got " +
                           std::to_string(options.num_kv_blocks));
  }
  ModelRunnerOptions opts = options;
  const int32_t model_len = weights->config.max_seq_len;
  if (opts.max_model_len <= 0) opts.max_model_len = model_len;
  if (opts.max_model_len > model_len) {
    return InvalidArgument("max model length " + std::to_string(opts.max_model_len) +
                           " exceeds the model's context length " + std::to_string(model_len));
  }
  std::unique_ptr<ModelRunner> runner(
      new ModelRunner(std::move(weights), std::move(backend), opts));
  TS_RETURN_IF_ERROR(runner->Init());
  return runner;
}

const float* ModelRunner::Upload(const std::vector<float>& host) {
  DeviceBuffer buf(backend_.get(), host.size() * sizeof(float));
  if (!buf.ok()) return nullptr;
  backend_->CopyToDevice(buf.as<void>(), host.data(), host.size() * sizeof(float));
  const float* p = buf.as<float>();
  weight_buffers_.push_back(std::move(buf));
  return p;
}

Status ModelRunner::Init() {
  const LlamaWeights& w = *weights_;
  const ModelConfig& c = w.config;
  embedding_ = Upload(w.token_embedding);
  final_norm_ = Upload(w.final_norm);
  lm_head_ = c.shared_classifier ? embedding_ : Upload(w.classifier);
  rope_inv_freq_ = Upload(c.RopeInvFreq());
  if (embedding_ == nullptr || final_norm_ == nullptr || lm_head_ == nullptr ||
      rope_inv_freq_ == nullptr) {
    return ResourceExhausted("out of device memory uploading weights");
  }
  const int64_t per_layer_floats =
      2 * static_cast<int64_t>(options_.num_kv_blocks) * options_.block_size * c.kv_dim();
  kv_cache_ = DeviceBuffer(backend_.get(),
                           static_cast<size_t>(per_layer_floats) * c.num_layers * sizeof(float));
  if (!kv_cache_.ok()) {
    return ResourceExhausted("cannot allocate the KV cache (" +
                             std::to_string(options_.num_kv_blocks) + " blocks of " +
                             std::to_string(options_.block_size) + " tokens)");
  }
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LlamaLayerWeights& lw = w.layers[l];
    const bool has_bias = !lw.bqkv.empty();
    if (has_bias && lw.bqkv.size() != static_cast<size_t>(c.q_dim() + 2 * c.kv_dim())) {
      return InvalidArgument("layer " + std::to_string(l) + ": qkv bias has " +
                             std::to_string(lw.bqkv.size()) + " values, want " +
                             std::to_string(c.q_dim() + 2 * c.kv_dim()));
    }
    LayerPtrs p{Upload(lw.attn_norm),
                Upload(lw.wqkv),
                has_bias ? Upload(lw.bqkv) : nullptr,
                Upload(lw.wo),
                Upload(lw.ffn_norm),
                Upload(lw.w13),
                Upload(lw.w2),
                nullptr,
                nullptr};
    if (!p.attn_norm || !p.wqkv || (has_bias && !p.bqkv) || !p.wo || !p.ffn_norm || !p.w13 ||
        !p.w2) {
      return ResourceExhausted("out of device memory uploading layer " + std::to_string(l));
    }
    p.k_cache = kv_cache_.as<float>() + l * per_layer_floats;
    p.v_cache = p.k_cache + per_layer_floats / 2;
    layers_.push_back(p);
  }
  weights_.reset();  // the backend holds the copy now
  return Status::Ok();
}

Status ModelRunner::EnsureWorkspace(int32_t num_tokens, int32_t num_seqs, int32_t num_sampled,
                                    int32_t table_entries) {
  const ModelConfig& c = config_;
  Backend* b = backend_.get();
  auto grow = [&](DeviceBuffer& buf, size_t bytes) {
    if (buf.bytes() < bytes) buf = DeviceBuffer(b, bytes);
    return buf.ok();
  };
  bool ok = true;
  if (num_tokens > cap_tokens_) {
    const size_t n = static_cast<size_t>(num_tokens);
    const size_t qkv_width = static_cast<size_t>(c.q_dim()) + 2 * c.kv_dim();
    ok = ok && grow(x_, n * c.dim * 4) && grow(xb_, n * c.dim * 4) &&
         grow(qkv_, n * qkv_width * 4) && grow(att_, n * c.q_dim() * 4) &&
         grow(delta_, n * c.dim * 4) && grow(gate_up_, n * 2 * c.hidden_dim * 4) &&
         grow(hidden_, n * c.hidden_dim * 4) && grow(d_tokens_, n * 4) &&
         grow(d_positions_, n * 4) && grow(d_slots_, n * 8);
    cap_tokens_ = num_tokens;
  }
  if (num_seqs > cap_seqs_) {
    ok = ok && grow(d_query_start_, (static_cast<size_t>(num_seqs) + 1) * 4);
    cap_seqs_ = num_seqs;
  }
  if (num_sampled > cap_sampled_) {
    const size_t m = static_cast<size_t>(num_sampled);
    ok = ok && grow(sampled_x_, m * c.dim * 4) && grow(logits_, m * c.vocab_size * 4) &&
         grow(d_sample_rows_, m * 4);
    cap_sampled_ = num_sampled;
  }
  if (table_entries > cap_table_) {
    ok = ok && grow(d_block_tables_, static_cast<size_t>(table_entries) * 4);
    cap_table_ = table_entries;
  }
  if (!ok) {
    cap_tokens_ = cap_seqs_ = cap_sampled_ = cap_table_ = 0;
    return ResourceExhausted("out of device memory for a batch of " + std::to_string(num_tokens) +
                             " tokens");
  }
  return Status::Ok();
}

StatusOr<ExecutorOutput> ModelRunner::Execute(const ScheduledBatch& batch) {
  TS_RETURN_IF_ERROR(batch.Validate(options_.num_kv_blocks, options_.block_size));
  const ModelConfig& c = config_;
  const int32_t n = batch.num_tokens();
  const int32_t num_seqs = batch.num_seqs();
  for (int32_t t = 0; t < n; ++t) {
    if (batch.token_ids[t] < 0 || batch.token_ids[t] >= c.vocab_size) {
      return InvalidArgument("token id " + std::to_string(batch.token_ids[t]) +
                             " outside the vocabulary of " + std::to_string(c.vocab_size));
    }
    if (batch.positions[t] >= options_.max_model_len) {
      return OutOfRange("position " + std::to_string(batch.positions[t]) +
                        " is past the max model length " + std::to_string(options_.max_model_len));
    }
  }
  std::vector<int32_t> sample_rows;
  for (int32_t s = 0; s < num_seqs; ++s) {
    if (batch.sample[s]) sample_rows.push_back(batch.query_start[s + 1] - 1);
  }
  const int32_t num_sampled = static_cast<int32_t>(sample_rows.size());
  TS_RETURN_IF_ERROR(
      EnsureWorkspace(n, num_seqs, num_sampled, static_cast<int32_t>(batch.block_tables.size())));

  Backend& b = *backend_;
  b.CopyToDevice(d_tokens_.as<void>(), batch.token_ids.data(), n * sizeof(int32_t));
  b.CopyToDevice(d_positions_.as<void>(), batch.positions.data(), n * sizeof(int32_t));
  b.CopyToDevice(d_slots_.as<void>(), batch.slot_mapping.data(), n * sizeof(int64_t));
  b.CopyToDevice(d_query_start_.as<void>(), batch.query_start.data(),
                 (num_seqs + 1) * sizeof(int32_t));
  b.CopyToDevice(d_block_tables_.as<void>(), batch.block_tables.data(),
                 batch.block_tables.size() * sizeof(int32_t));
  b.CopyToDevice(d_sample_rows_.as<void>(), sample_rows.data(), num_sampled * sizeof(int32_t));

  AttentionMetadata meta;
  meta.num_tokens = n;
  meta.num_seqs = num_seqs;
  meta.positions = d_positions_.as<int32_t>();
  meta.query_start = d_query_start_.as<int32_t>();
  meta.block_tables = d_block_tables_.as<int32_t>();
  meta.max_blocks_per_seq = batch.max_blocks_per_seq;
  meta.block_size = options_.block_size;

  const int32_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.hidden_dim;
  const int32_t qkv_width = q_dim + 2 * kv_dim;
  float* x = x_.as<float>();
  float* xb = xb_.as<float>();
  float* qkv = qkv_.as<float>();
  float* att = att_.as<float>();
  float* delta = delta_.as<float>();

  b.Embedding(embedding_, d_tokens_.as<int32_t>(), n, dim, x);
  b.RmsNorm(x, layers_[0].attn_norm, n, dim, c.rms_norm_eps, xb);
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerPtrs& L = layers_[l];
    // Attention block: xb = norm(x) already.
    b.Gemm(xb, L.wqkv, n, qkv_width, dim, qkv);
    if (L.bqkv != nullptr) b.AddBias(qkv, L.bqkv, n, qkv_width);
    float* q = qkv;
    float* k = qkv + q_dim;
    float* v = qkv + q_dim + kv_dim;
    b.Rope(q, qkv_width, k, qkv_width, d_positions_.as<int32_t>(), n, c.num_heads, c.num_kv_heads,
           c.head_dim, rope_inv_freq_, c.rope_style);
    b.WriteKvCache(k, v, qkv_width, d_slots_.as<int64_t>(), n, kv_dim, L.k_cache, L.v_cache);
    b.PagedAttention(q, qkv_width, L.k_cache, L.v_cache, meta, c.num_heads, c.num_kv_heads,
                     c.head_dim, att);
    b.Gemm(att, L.wo, n, dim, q_dim, delta);
    b.AddRmsNorm(x, delta, L.ffn_norm, n, dim, c.rms_norm_eps, xb);
    // Feed-forward block.
    b.Gemm(xb, L.w13, n, 2 * hidden, dim, gate_up_.as<float>());
    b.SiluAndMul(gate_up_.as<float>(), n, hidden, hidden_.as<float>());
    b.Gemm(hidden_.as<float>(), L.w2, n, dim, hidden, delta);
    const float* next_norm = l + 1 < c.num_layers ? layers_[l + 1].attn_norm : final_norm_;
    b.AddRmsNorm(x, delta, next_norm, n, dim, c.rms_norm_eps, xb);
  }

  ExecutorOutput out;
  out.vocab_size = c.vocab_size;
  if (num_sampled > 0) {
    b.GatherRows(xb, d_sample_rows_.as<int32_t>(), num_sampled, dim, sampled_x_.as<float>());
    b.Gemm(sampled_x_.as<float>(), lm_head_, num_sampled, c.vocab_size, dim, logits_.as<float>());
    out.logits.resize(static_cast<size_t>(num_sampled) * c.vocab_size);
    b.CopyToHost(out.logits.data(), logits_.as<void>(), out.logits.size() * sizeof(float));
  }
  TS_RETURN_IF_ERROR(b.Synchronize());
  return out;
}

}  // namespace tinyserve
