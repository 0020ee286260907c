#include "models/model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace tinyserve {
namespace {

// The top logprobs a sampled row may ask for, as the API caps them (vLLM's max_logprobs, 20:
// server/protocol/sampling_fields.h); the backend's scratch is reserved for that many.
constexpr int32_t kReservedTopLogprobs = 20;

}  // namespace

int64_t ModelRunner::KvBytesPerToken(const ModelConfig& c, int64_t element_bytes) {
  return 2 * static_cast<int64_t>(c.num_layers) * c.kv_dim() * element_bytes;
}

ModelRunner::ModelRunner(std::shared_ptr<const LlamaWeights> weights,
                         std::unique_ptr<Backend> backend, const ModelRunnerOptions& options)
    : config_(weights->config),
      sampling_(weights->config.vocab_size, backend.get()),
      weights_(std::move(weights)),
      backend_(std::move(backend)),
      options_(options) {}

ModelRunner::~ModelRunner() {
  // Graphs and buffers must go before the backend that made them.
  if (backend_ != nullptr) backend_->ClearGraphs();
  x_ = {}, xb_ = {}, qkv_ = {}, att_ = {}, delta_ = {}, gate_up_ = {}, hidden_ = {};
  sampled_x_ = {}, logits_ = {}, d_inputs_ = {}, g_inputs_ = {}, kv_cache_ = {};
  if (backend_ != nullptr) backend_->FreeHostStaging(staging_);
  weight_buffers_.clear();
  for (void* p : matrix_buffers_) backend_->Deallocate(p);
}

std::vector<int32_t> ModelRunner::GraphBatchSizes(int32_t max_num_seqs) {
  std::vector<int32_t> sizes;
  for (int32_t b = 1; b <= 8; b *= 2) {
    sizes.push_back(b);
    if (b >= max_num_seqs) return sizes;
  }
  for (int32_t b = 16; b - 16 < max_num_seqs; b += 16) sizes.push_back(b);
  return sizes;
}

StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    std::shared_ptr<const LlamaWeights> weights, std::unique_ptr<Backend> backend,
    const ModelRunnerOptions& options) {
  if (weights == nullptr || backend == nullptr) return InvalidArgument("ModelRunner: null input");
  if (options.block_size <= 0) {
    return InvalidArgument("block size must be positive, got " +
                           std::to_string(options.block_size));
  }
  size_t free_bytes = 0, total_bytes = 0;
  if (options.num_kv_blocks < 0 ||
      (options.num_kv_blocks == 0 && !backend->MemoryInfo(&free_bytes, &total_bytes))) {
    return InvalidArgument("number of KV blocks must be positive, got " +
                           std::to_string(options.num_kv_blocks));
  }
  if (options.num_kv_blocks == 0 &&
      !(options.gpu_memory_utilization > 0.0f && options.gpu_memory_utilization <= 1.0f)) {
    return InvalidArgument("gpu memory utilization must be in (0, 1], got " +
                           std::to_string(options.gpu_memory_utilization));
  }
  if (options.max_num_seqs <= 0 || options.max_num_batched_tokens <= 0) {
    return InvalidArgument("max_num_seqs and max_num_batched_tokens must be positive");
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

WeightRef ModelRunner::UploadMatrix(const std::vector<float>& host, int32_t rows, int32_t cols) {
  const WeightRef w = backend_->UploadMatrix(host.data(), rows, cols);
  if (w.data != nullptr) matrix_buffers_.push_back(const_cast<void*>(w.data));
  return w;
}

WeightRef ModelRunner::UploadMatrix(const std::vector<float>& host,
                                    const QuantizedMatrix& quantized, int32_t rows, int32_t cols) {
  if (quantized.empty()) return UploadMatrix(host, rows, cols);
  const WeightRef w = backend_->UploadQuantMatrix(
      quantized.parts.data(), static_cast<int32_t>(quantized.parts.size()), cols);
  if (w.data != nullptr) matrix_buffers_.push_back(const_cast<void*>(w.data));
  return w;
}

Status ModelRunner::Init() {
  const LlamaWeights& w = *weights_;  // released half-way, once the backend holds its copy
  const ModelConfig& c = config_;     // so: the runner's own copy of the config, never w.config
  // The loaders check every tensor's shape; this holds the runner to the config it was given.
  auto shape_error = [](const std::vector<float>& m, const QuantizedMatrix& q, int32_t rows,
                        int32_t cols, const std::string& what) -> Status {
    if (!q.empty()) {
      if (q.rows() == rows && q.parts.size() <= 4) return Status::Ok();
      return InvalidArgument(what + " has " + std::to_string(q.rows()) + " quantized rows in " +
                             std::to_string(q.parts.size()) + " parts, want " +
                             std::to_string(rows) + " rows in at most 4");
    }
    if (m.size() == static_cast<size_t>(rows) * static_cast<size_t>(cols)) return Status::Ok();
    return InvalidArgument(what + " has " + std::to_string(m.size()) + " values, want " +
                           std::to_string(rows) + " x " + std::to_string(cols));
  };
  TS_RETURN_IF_ERROR(
      shape_error(w.token_embedding, w.q_token_embedding, c.vocab_size, c.dim, "token embedding"));
  if (!c.shared_classifier) {
    TS_RETURN_IF_ERROR(
        shape_error(w.classifier, w.q_classifier, c.vocab_size, c.dim, "classifier"));
  }
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LlamaLayerWeights& lw = w.layers[l];
    const std::string name = "layer " + std::to_string(l) + ": ";
    TS_RETURN_IF_ERROR(
        shape_error(lw.wqkv, lw.q_wqkv, c.q_dim() + 2 * c.kv_dim(), c.dim, name + "wqkv"));
    TS_RETURN_IF_ERROR(shape_error(lw.wo, lw.q_wo, c.dim, c.q_dim(), name + "wo"));
    TS_RETURN_IF_ERROR(shape_error(lw.w13, lw.q_w13, 2 * c.hidden_dim, c.dim, name + "w13"));
    TS_RETURN_IF_ERROR(shape_error(lw.w2, lw.q_w2, c.dim, c.hidden_dim, name + "w2"));
  }
  embedding_ = UploadMatrix(w.token_embedding, w.q_token_embedding, c.vocab_size, c.dim);
  final_norm_ = Upload(w.final_norm);
  lm_head_ = c.shared_classifier ? embedding_
                                 : UploadMatrix(w.classifier, w.q_classifier, c.vocab_size, c.dim);
  rope_inv_freq_ = Upload(c.RopeInvFreq());
  if (embedding_.data == nullptr || final_norm_ == nullptr || lm_head_.data == nullptr ||
      rope_inv_freq_ == nullptr) {
    return ResourceExhausted("out of device memory uploading weights");
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
                UploadMatrix(lw.wqkv, lw.q_wqkv, c.q_dim() + 2 * c.kv_dim(), c.dim),
                has_bias ? Upload(lw.bqkv) : nullptr,
                UploadMatrix(lw.wo, lw.q_wo, c.dim, c.q_dim()),
                Upload(lw.ffn_norm),
                UploadMatrix(lw.w13, lw.q_w13, 2 * c.hidden_dim, c.dim),
                UploadMatrix(lw.w2, lw.q_w2, c.dim, c.hidden_dim),
                nullptr,
                nullptr,
                KvScales{lw.k_scale, lw.v_scale}};
    if (!p.attn_norm || !p.wqkv.data || (has_bias && !p.bqkv) || !p.wo.data || !p.ffn_norm ||
        !p.w13.data || !p.w2.data) {
      return ResourceExhausted("out of device memory uploading layer " + std::to_string(l));
    }
    layers_.push_back(p);
  }
  weight_storage_ = w.storage;  // quantized matrices are read where they lie
  weights_.reset();             // the backend holds the copy now

  use_graphs_ = backend_->SupportsGraphs() && !options_.enforce_eager;
  if (options_.calculate_kv_scales && backend_->kv_cache_dtype() == DType::kFp8E4m3) {
    abs_max_ = DeviceBuffer(backend_.get(), 2 * sizeof(float));
    if (!abs_max_.ok()) return ResourceExhausted("out of device memory for the KV-cache scales");
    kv_scales_pending_ = true;
  }
  // The workspace is sized for the largest step the scheduler can hand over, here and not at the
  // first such step (vLLM's profile run does the same): a device backend must know what is left
  // for the KV cache, and on the CPU the first touch of ~100 MB of fresh pages would otherwise
  // land inside the first large step (0.5 s on the development VM). Larger steps (prompt logprobs
  // rows beyond one a sequence) still grow it on demand.
  graph_table_width_ = (options_.max_model_len + options_.block_size - 1) / options_.block_size;
  int32_t seqs = options_.max_num_seqs;
  int32_t tokens = options_.max_num_batched_tokens;
  if (!backend_->is_host()) {
    graph_sizes_ = GraphBatchSizes(options_.max_num_seqs);
    seqs = std::max(seqs, graph_sizes_.back());
    tokens = std::max(tokens, graph_sizes_.back());
  }
  TS_RETURN_IF_ERROR(EnsureWorkspace(tokens, seqs, seqs, seqs * graph_table_width_));
  if (!backend_->is_host()) {
    const int32_t max_graph = graph_sizes_.back();
    if (use_graphs_) {
      const size_t bytes = LayoutInputs(max_graph, max_graph, max_graph,
                                        static_cast<size_t>(max_graph) * graph_table_width_)
                               .bytes;
      g_inputs_ = DeviceBuffer(backend_.get(), bytes);
      if (!g_inputs_.ok() || (bytes > staging_bytes_ && !GrowStaging(bytes))) {
        return ResourceExhausted("out of memory for the decode graph inputs");
      }
    }
  }
  // The backend's scratch for that step too (attention splits, activations for its GEMMs,
  // sampling, penalty histories), before what is left is measured for the KV cache.
  StepLimits limits;
  limits.max_tokens = tokens;
  limits.max_seqs = seqs;
  limits.max_context = graph_table_width_ * options_.block_size;
  limits.num_heads = c.num_heads;
  limits.num_kv_heads = c.num_kv_heads;
  limits.head_dim = c.head_dim;
  limits.max_linear_k = std::max({c.dim, c.q_dim(), c.hidden_dim});
  limits.vocab = c.vocab_size;
  limits.max_top_logprobs = kReservedTopLogprobs;
  if (Status s = backend_->ReserveScratch(limits); !s.ok()) {
    return ResourceExhausted("cannot reserve the backend's scratch for a step of " +
                             std::to_string(tokens) + " tokens and " + std::to_string(seqs) +
                             " sequences: " + s.message());
  }
  if (options_.num_kv_blocks == 0) TS_RETURN_IF_ERROR(SizeKvCacheFromMemory());

  const int64_t element_bytes = static_cast<int64_t>(backend_->KvCacheElementBytes());
  const int64_t per_layer_bytes = 2 * static_cast<int64_t>(options_.num_kv_blocks) *
                                  options_.block_size * c.kv_dim() * element_bytes;
  kv_cache_ = DeviceBuffer(backend_.get(), static_cast<size_t>(per_layer_bytes) * c.num_layers);
  if (!kv_cache_.ok()) {
    return ResourceExhausted("cannot allocate the KV cache (" +
                             std::to_string(options_.num_kv_blocks) + " blocks of " +
                             std::to_string(options_.block_size) + " tokens)");
  }
  for (int32_t l = 0; l < c.num_layers; ++l) {
    char* layer = kv_cache_.as<char>() + l * per_layer_bytes;
    layers_[l].k_cache = layer;
    layers_[l].v_cache = layer + per_layer_bytes / 2;
  }
  return backend_->Synchronize();
}

Status ModelRunner::SizeKvCacheFromMemory() {
  TS_RETURN_IF_ERROR(backend_->Synchronize());
  size_t free_bytes = 0, total_bytes = 0;
  if (!backend_->MemoryInfo(&free_bytes, &total_bytes)) {
    return InvalidArgument("the backend reports no memory size: give the number of KV blocks");
  }
  // vLLM's rule: everything this process holds stays within utilization * total. What is in use
  // now (weights, workspace, the backend's reserved scratch, other processes) counts against it;
  // 64 MiB is left for what the CUDA runtime allocates later by itself (kernels loaded lazily on
  // first launch, instantiated graphs) and for rarer scratch growth (prompt-logprob rows, long
  // token lists), which fails only its own step when memory is short.
  const double budget = options_.gpu_memory_utilization * static_cast<double>(total_bytes) -
                        static_cast<double>(total_bytes - free_bytes) - double{64 << 20};
  const double block_bytes = static_cast<double>(KvBytesPerToken(
                                 config_, static_cast<int64_t>(backend_->KvCacheElementBytes()))) *
                             static_cast<double>(options_.block_size);
  const double blocks = budget / block_bytes;
  if (blocks < 1.0) {
    return ResourceExhausted(
        "no device memory left for the KV cache after the weights and activations (" +
        std::to_string(free_bytes >> 20) + " MiB free of " + std::to_string(total_bytes >> 20) +
        " MiB; raise --gpu-memory-utilization or give --num-kv-blocks)");
  }
  options_.num_kv_blocks = static_cast<int32_t>(std::min(blocks, 2.0e9));
  return Status::Ok();
}

Status ModelRunner::EnsureWorkspace(int32_t num_tokens, int32_t num_seqs, int32_t num_sampled,
                                    int32_t table_entries) {
  const ModelConfig& c = config_;
  Backend* b = backend_.get();
  bool grown = false;
  auto grow = [&](DeviceBuffer& buf, size_t bytes) {
    if (buf.bytes() < bytes) {
      buf = DeviceBuffer(b, bytes);
      grown = true;
    }
    return buf.ok();
  };
  bool ok = true;
  if (num_tokens > cap_tokens_) {
    const size_t n = static_cast<size_t>(num_tokens);
    const size_t qkv_width = static_cast<size_t>(c.q_dim()) + 2 * c.kv_dim();
    ok = ok && grow(x_, n * c.dim * 4) && grow(xb_, n * c.dim * 4) &&
         grow(qkv_, n * qkv_width * 4) && grow(att_, n * c.q_dim() * 4) &&
         grow(delta_, n * c.dim * 4) && grow(gate_up_, n * 2 * c.hidden_dim * 4) &&
         grow(hidden_, n * c.hidden_dim * 4);
    cap_tokens_ = num_tokens;
  }
  cap_seqs_ = std::max(cap_seqs_, num_seqs);
  if (num_sampled > cap_sampled_) {
    const size_t m = static_cast<size_t>(num_sampled);
    ok = ok && grow(sampled_x_, m * c.dim * 4) && grow(logits_, m * c.vocab_size * 4);
    cap_sampled_ = num_sampled;
  }
  cap_table_ = std::max(cap_table_, table_entries);
  const size_t input_bytes =
      LayoutInputs(cap_tokens_, cap_seqs_, cap_sampled_, static_cast<size_t>(cap_table_)).bytes;
  ok = ok && grow(d_inputs_, input_bytes) &&
       (input_bytes <= staging_bytes_ || GrowStaging(input_bytes));
  if (grown && !graph_ids_.empty()) {  // recorded graphs point at the old buffers
    backend_->ClearGraphs();
    graph_ids_.clear();
  }
  if (!ok) {
    cap_tokens_ = cap_seqs_ = cap_sampled_ = cap_table_ = 0;
    return ResourceExhausted("out of device memory for a batch of " + std::to_string(num_tokens) +
                             " tokens");
  }
  return Status::Ok();
}

ModelRunner::InputLayout ModelRunner::LayoutInputs(int32_t n, int32_t seqs, int32_t rows,
                                                   size_t table_entries) {
  InputLayout l{};
  size_t at = 0;
  auto part = [&at](size_t bytes) {
    const size_t start = at;
    at += (bytes + 15) / 16 * 16;
    return start;
  };
  l.slots = part(static_cast<size_t>(n) * 8);
  l.tokens = part(static_cast<size_t>(n) * 4);
  l.positions = part(static_cast<size_t>(n) * 4);
  l.query_start = part((static_cast<size_t>(seqs) + 1) * 4);
  l.sample_rows = part(static_cast<size_t>(rows) * 4);
  l.table_stride = part(4);
  l.block_tables = part(table_entries * 4);
  l.bytes = at;
  return l;
}

bool ModelRunner::GrowStaging(size_t bytes) {
  backend_->FreeHostStaging(staging_);  // (a pending copy from it is waited for first)
  staging_pending_ = false;
  staging_ = backend_->AllocateHostStaging(bytes);
  staging_bytes_ = staging_ != nullptr ? bytes : 0;
  return staging_ != nullptr;
}

char* ModelRunner::Staging(Status* status) {
  if (staging_pending_) {
    // The last step ended before its own wait (it failed): its copy may still read the buffer.
    *status = backend_->Synchronize();
    if (!status->ok()) return nullptr;
    staging_pending_ = false;
  }
  return static_cast<char*>(staging_);
}

void ModelRunner::UploadStaged(void* device, size_t bytes) {
  backend_->CopyToDevice(device, staging_, bytes);
  staging_pending_ = true;  // until the step's own wait for its results
}

StatusOr<LogitsOutput> ModelRunner::ComputeLogits(const ScheduledBatch& batch) {
  StepRows rows;
  TS_RETURN_IF_ERROR(RunStep(batch, &rows));
  LogitsOutput out = CopyLogits(batch, rows);  // (CopyToHost waits for the step)
  staging_pending_ = false;
  return out;
}

LogitsOutput ModelRunner::CopyLogits(const ScheduledBatch& batch, const StepRows& rows) {
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  Backend& b = *backend_;
  LogitsOutput out;
  out.vocab_size = config_.vocab_size;
  out.logits.resize(rows.sampled.size() * vocab);
  for (size_t i = 0; i < rows.sampled.size(); ++i) {
    b.CopyToHost(out.logits.data() + i * vocab, logits_.as<float>() + rows.sampled[i] * vocab,
                 vocab * sizeof(float));
  }
  out.prompt_logits.resize(static_cast<size_t>(batch.num_prompt_logit_rows()) * vocab);
  if (!out.prompt_logits.empty()) {
    b.CopyToHost(out.prompt_logits.data(), logits_.as<float>() + rows.first_prompt_row * vocab,
                 out.prompt_logits.size() * sizeof(float));
  }
  return out;
}

bool ModelRunner::AwaitsBitmaskFill() const {
  return options_.overlap_grammar_masks.value_or(!backend_->is_host());
}

StatusOr<ExecutorOutput> ModelRunner::Execute(const ScheduledBatch& batch) {
  backend_->BindToCallingThread();
  sampling_.Apply(batch);
  StatusOr<std::vector<SampleRow>> sample = sampling_.Rows(batch);
  if (!sample.ok()) return sample.status();
  const int32_t num_prompt_rows = batch.num_prompt_logit_rows();
  if (num_prompt_rows > 0 &&
      batch.prompt_logit_targets.size() != static_cast<size_t>(num_prompt_rows)) {
    return InvalidArgument("batch asks for prompt logprobs without their target tokens");
  }
  StepRows rows;
  TS_RETURN_IF_ERROR(RunStep(batch, &rows));
  Backend& b = *backend_;
  const int32_t vocab = config_.vocab_size;
  const float* logits = logits_.as<float>();
  ExecutorOutput out;
  out.sampled.resize(sample->size());
  // The forward pass is queued (on a device backend, still running): now the grammar masks are
  // needed (the engine filled them meanwhile, AwaitsBitmaskFill).
  batch.AwaitBitmask();
  // Sampled rows are the first rows of the logits, except in a graph step where some sequences
  // did not sample (one-token prefill chunks): then row by row.
  const bool contiguous =
      rows.sampled.empty() || rows.sampled.back() + 1 == static_cast<int32_t>(rows.sampled.size());
  if (contiguous) {
    TS_RETURN_IF_ERROR(b.SampleRows(logits, vocab, sample->data(),
                                    static_cast<int32_t>(sample->size()), out.sampled.data()));
  } else {
    for (size_t i = 0; i < rows.sampled.size(); ++i) {
      TS_RETURN_IF_ERROR(b.SampleRows(logits + static_cast<size_t>(rows.sampled[i]) * vocab, vocab,
                                      &(*sample)[i], 1, &out.sampled[i]));
    }
  }
  out.prompt_logprobs.resize(num_prompt_rows);
  TS_RETURN_IF_ERROR(b.ScoreRows(logits + static_cast<size_t>(rows.first_prompt_row) * vocab, vocab,
                                 batch.prompt_logit_targets.data(),
                                 batch.prompt_logit_num_top.data(), num_prompt_rows,
                                 out.prompt_logprobs.data()));
  if (options_.keep_sampled_logits)
    last_sampled_logits_ = std::move(CopyLogits(batch, rows).logits);
  TS_RETURN_IF_ERROR(b.Synchronize());
  staging_pending_ = false;
  sampling_.Accept(batch, out.sampled);
  return out;
}

Status ModelRunner::RunStep(const ScheduledBatch& batch, StepRows* rows) {
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
  const int32_t num_prompt_rows = batch.num_prompt_logit_rows();
  if (use_graphs_ && !kv_scales_pending_ && n == num_seqs && num_seqs <= graph_sizes_.back() &&
      num_prompt_rows == 0) {
    bool one_token_each = true;
    for (int32_t s = 0; s < num_seqs; ++s) one_token_each &= batch.num_query_tokens(s) == 1;
    if (one_token_each) return RunDecodeGraph(batch, rows);
  }
  // Rows through the final norm and LM head: the sampled rows, then the prompt-logit rows.
  std::vector<int32_t> sample_rows;
  for (int32_t s = 0; s < num_seqs; ++s) {
    if (batch.sample[s]) sample_rows.push_back(batch.query_start[s + 1] - 1);
  }
  const int32_t num_sampled = static_cast<int32_t>(sample_rows.size());
  rows->sampled.resize(num_sampled);
  for (int32_t i = 0; i < num_sampled; ++i) rows->sampled[i] = i;
  rows->first_prompt_row = num_sampled;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t first = batch.query_start[s] + batch.prompt_logits_start[s];
    for (int32_t i = 0; i < batch.num_prompt_logits[s]; ++i) sample_rows.push_back(first + i);
  }
  const int32_t num_rows = num_sampled + num_prompt_rows;
  TS_RETURN_IF_ERROR(
      EnsureWorkspace(n, num_seqs, num_rows, static_cast<int32_t>(batch.block_tables.size())));

  // Every input in one copy from the staging buffer.
  const InputLayout l = LayoutInputs(n, num_seqs, num_rows, batch.block_tables.size());
  Status staged;
  char* h = Staging(&staged);
  if (h == nullptr) return staged;
  // A part may be empty (no row sampled): memcpy is never given its null data().
  auto put = [h](size_t offset, const void* src, size_t bytes) {
    if (bytes > 0) std::memcpy(h + offset, src, bytes);
  };
  put(l.slots, batch.slot_mapping.data(), n * sizeof(int64_t));
  put(l.tokens, batch.token_ids.data(), n * sizeof(int32_t));
  put(l.positions, batch.positions.data(), n * sizeof(int32_t));
  put(l.query_start, batch.query_start.data(), (num_seqs + 1) * sizeof(int32_t));
  put(l.sample_rows, sample_rows.data(), num_rows * sizeof(int32_t));
  put(l.table_stride, &batch.max_blocks_per_seq, sizeof(int32_t));
  put(l.block_tables, batch.block_tables.data(), batch.block_tables.size() * sizeof(int32_t));
  UploadStaged(d_inputs_.as<void>(), l.bytes);

  const char* d = d_inputs_.as<char>();
  StepInputs in;
  in.tokens = reinterpret_cast<const int32_t*>(d + l.tokens);
  in.slots = reinterpret_cast<const int64_t*>(d + l.slots);
  in.sample_rows = reinterpret_cast<const int32_t*>(d + l.sample_rows);
  in.num_sampled = num_rows;
  in.meta.num_tokens = n;
  in.meta.num_seqs = num_seqs;
  in.meta.positions = reinterpret_cast<const int32_t*>(d + l.positions);
  in.meta.query_start = reinterpret_cast<const int32_t*>(d + l.query_start);
  in.meta.block_tables = reinterpret_cast<const int32_t*>(d + l.block_tables);
  in.meta.max_blocks_per_seq = batch.max_blocks_per_seq;  // the table's own width: no stride
  in.meta.block_size = options_.block_size;
  in.meta.min_query_len = n;
  for (int32_t s = 0; s < num_seqs; ++s) {
    in.meta.min_query_len = std::min(in.meta.min_query_len, batch.num_query_tokens(s));
  }
  Forward(in);
  return Status::Ok();
}

Status ModelRunner::RunDecodeGraph(const ScheduledBatch& batch, StepRows* step_rows) {
  const int32_t num_seqs = batch.num_seqs();
  const int32_t bs = *std::lower_bound(graph_sizes_.begin(), graph_sizes_.end(), num_seqs);
  const int32_t width = graph_table_width_;
  // Inputs padded to bs rows: padding rows read token 0 at position 0 through block 0 and write
  // their K/V nowhere (slot -1); their outputs are dropped. The graph's kernels are launched for
  // tables `width` wide, but only the batch's own width goes up: the attention reads the rows'
  // stride from the uploaded scalar (AttentionMetadata::table_stride).
  const int32_t w = std::clamp(batch.max_blocks_per_seq, 1, width);
  const InputLayout l = LayoutInputs(bs, bs, bs, static_cast<size_t>(bs) * width);
  Status staged;
  char* h = Staging(&staged);
  if (h == nullptr) return staged;
  auto* slots = reinterpret_cast<int64_t*>(h + l.slots);
  auto* tokens = reinterpret_cast<int32_t*>(h + l.tokens);
  auto* positions = reinterpret_cast<int32_t*>(h + l.positions);
  auto* query_start = reinterpret_cast<int32_t*>(h + l.query_start);
  auto* rows = reinterpret_cast<int32_t*>(h + l.sample_rows);
  auto* tables = reinterpret_cast<int32_t*>(h + l.block_tables);
  std::memcpy(h + l.table_stride, &w, sizeof(int32_t));
  for (int32_t s = 0; s < bs; ++s) {
    const bool real = s < num_seqs;
    slots[s] = real ? batch.slot_mapping[s] : -1;
    tokens[s] = real ? batch.token_ids[s] : 0;
    positions[s] = real ? batch.positions[s] : 0;
    rows[s] = s;
    int32_t* row = tables + static_cast<size_t>(s) * w;
    const int32_t have = real ? std::min(w, batch.max_blocks_per_seq) : 0;
    if (have > 0) {
      std::copy_n(batch.block_tables.data() + static_cast<size_t>(s) * batch.max_blocks_per_seq,
                  have, row);
    }
    std::fill(row + have, row + w, 0);
  }
  for (int32_t i = 0; i <= bs; ++i) query_start[i] = i;
  UploadStaged(g_inputs_.as<void>(), l.block_tables + static_cast<size_t>(bs) * w * 4);

  Backend& b = *backend_;
  const char* d = g_inputs_.as<char>();
  StepInputs in;
  in.tokens = reinterpret_cast<const int32_t*>(d + l.tokens);
  in.slots = reinterpret_cast<const int64_t*>(d + l.slots);
  in.sample_rows = reinterpret_cast<const int32_t*>(d + l.sample_rows);
  in.num_sampled = bs;
  in.meta.num_tokens = bs;
  in.meta.num_seqs = bs;
  in.meta.positions = reinterpret_cast<const int32_t*>(d + l.positions);
  in.meta.query_start = reinterpret_cast<const int32_t*>(d + l.query_start);
  in.meta.block_tables = reinterpret_cast<const int32_t*>(d + l.block_tables);
  in.meta.max_blocks_per_seq = width;
  in.meta.block_size = options_.block_size;
  in.meta.table_stride = reinterpret_cast<const int32_t*>(d + l.table_stride);
  in.meta.min_query_len = 1;

  auto recorded =
      std::find_if(graph_ids_.begin(), graph_ids_.end(),
                   [bs](const std::pair<int32_t, int32_t>& g) { return g.first == bs; });
  if (recorded != graph_ids_.end()) {
    TS_RETURN_IF_ERROR(b.ReplayGraph(recorded->second));
  } else {
    // First step of this size: run it eagerly (which also grows the backend's scratch buffers to
    // this shape), then record the same ops for the next steps.
    Forward(in);
    TS_RETURN_IF_ERROR(b.Synchronize());
    TS_RETURN_IF_ERROR(b.BeginGraphCapture());
    Forward(in);
    StatusOr<int32_t> id = b.EndGraphCapture();
    if (id.ok()) {
      graph_ids_.emplace_back(bs, *id);
    } else {
      // This step's logits came from the eager run; the next steps run eagerly too.
      std::fprintf(stderr, "tinyserve: recording a CUDA graph failed (%s); decode runs eagerly\n",
                   id.status().ToString().c_str());
      use_graphs_ = false;
    }
  }

  // Row s of the logits is sequence s (padding rows after the batch's).
  step_rows->sampled.clear();
  for (int32_t s = 0; s < num_seqs; ++s) {
    if (batch.sample[s]) step_rows->sampled.push_back(s);
  }
  step_rows->first_prompt_row = bs;  // none: graphs run no prompt-logit rows
  return Status::Ok();
}

void ModelRunner::Forward(const StepInputs& in) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const int32_t n = in.meta.num_tokens;
  const int32_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.hidden_dim;
  const int32_t qkv_width = q_dim + 2 * kv_dim;
  float* x = x_.as<float>();
  float* xb = xb_.as<float>();
  float* qkv = qkv_.as<float>();
  float* att = att_.as<float>();
  float* delta = delta_.as<float>();

  b.EmbeddingLookup(embedding_, in.tokens, n, dim, x);
  b.RmsNorm(x, layers_[0].attn_norm, n, dim, c.rms_norm_eps, xb);
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerPtrs& L = layers_[l];
    // Attention block: xb = norm(x) already.
    b.Linear(xb, L.wqkv, n, qkv_width, dim, qkv);
    if (L.bqkv != nullptr) b.AddBias(qkv, L.bqkv, n, qkv_width);
    float* q = qkv;
    float* k = qkv + q_dim;
    float* v = qkv + q_dim + kv_dim;
    if (kv_scales_pending_) {
      RopeAndWriteKvCalculatingScales(l, q, k, v, in);
      b.PagedAttention(q, qkv_width, L.k_cache, L.v_cache, in.meta, c.num_heads, c.num_kv_heads,
                       c.head_dim, att, L.kv_scales);
    } else {
      b.RopeWriteKvAndAttend(q, k, v, qkv_width, in.slots, in.meta, c.num_heads, c.num_kv_heads,
                             c.head_dim, rope_inv_freq_, c.rope_style, L.k_cache, L.v_cache, att,
                             L.kv_scales);
    }
    b.Linear(att, L.wo, n, dim, q_dim, delta);
    b.AddRmsNorm(x, delta, L.ffn_norm, n, dim, c.rms_norm_eps, xb);
    // Feed-forward block.
    b.LinearSiluAndMul(xb, L.w13, n, hidden, dim, gate_up_.as<float>(), hidden_.as<float>());
    b.Linear(hidden_.as<float>(), L.w2, n, dim, hidden, delta);
    const float* next_norm = l + 1 < c.num_layers ? layers_[l + 1].attn_norm : final_norm_;
    b.AddRmsNorm(x, delta, next_norm, n, dim, c.rms_norm_eps, xb);
  }
  kv_scales_pending_ = false;
  if (in.num_sampled > 0) {
    b.GatherRows(xb, in.sample_rows, in.num_sampled, dim, sampled_x_.as<float>());
    b.Linear(sampled_x_.as<float>(), lm_head_, in.num_sampled, c.vocab_size, dim,
             logits_.as<float>());
  }
}

void ModelRunner::RopeAndWriteKvCalculatingScales(int32_t l, float* q, float* k, float* v,
                                                  const StepInputs& in) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  LayerPtrs& L = layers_[l];
  const int32_t n = in.meta.num_tokens, stride = c.q_dim() + 2 * c.kv_dim();
  b.Rope(q, stride, k, stride, in.meta.positions, n, c.num_heads, c.num_kv_heads, c.head_dim,
         rope_inv_freq_, c.rope_style);
  float* d_max = abs_max_.as<float>();
  b.AbsMax(k, n, c.kv_dim(), stride, d_max);
  b.AbsMax(v, n, c.kv_dim(), stride, d_max + 1);
  float amax[2] = {0.0f, 0.0f};
  // A device error leaves the scales as they were; the step reports it.
  if (b.Synchronize().ok()) b.CopyToHost(amax, d_max, sizeof(amax));
  auto scale = [](float max, float range, float keep) {
    return max > 0.0f && std::isfinite(max) ? max / range : keep;
  };
  L.kv_scales = KvScales{scale(amax[0], kKScaleRange, L.kv_scales.k),
                         scale(amax[1], kVScaleRange, L.kv_scales.v)};
  b.WriteKvCache(k, v, stride, in.slots, n, c.kv_dim(), L.k_cache, L.v_cache, L.kv_scales);
}

std::vector<KvScales> ModelRunner::kv_scales() const {
  std::vector<KvScales> out;
  for (const LayerPtrs& L : layers_) out.push_back(L.kv_scales);
  return out;
}

}  // namespace tinyserve
