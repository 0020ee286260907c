// ModelRunner: the ModelExecutor over a Llama-family model on one Backend (DESIGN §2, §7).
//
// It owns the backend, its own copy of the weights in backend memory (matrices in the backend's
// weight dtype, norms fp32), the paged KV cache (per layer K and V [num_kv_blocks, block_size,
// num_kv_heads, head_dim] fp32) and the activation workspace, and runs one ScheduledBatch per
// Execute(): every sequence of the batch is a prefill chunk over its cached prefix or one decode
// token; the sequences that sample are sampled on the backend (Backend::SampleRows, with the
// per-request state of a SamplingStateTable) and the prompt-logit rows a batch asks for are scored
// there (prompt logprobs: those rows go through the final norm and LM head with the sampled ones,
// in the same GEMM; batches without them are unchanged). Only tokens and logprobs come back.
// ComputeLogits() runs the same forward pass and returns the logits instead (tests and tools). On a
// backend that records graphs (CUDA), a pure decode step (with no prompt-logit rows) is padded to
// the next recorded batch size (padding rows write to slot -1) and replayed from a graph recorded
// on first use; everything else runs eagerly, as on the CPU. Not thread-safe: the engine thread
// alone calls Execute().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/model_executor.h"
#include "kernels/backend.h"
#include "models/llama_weights.h"
#include "models/sampling_state_table.h"

namespace tinyserve {

struct ModelRunnerOptions {
  int32_t block_size = 16;
  // KV blocks to allocate. 0: as many as fit in gpu_memory_utilization of the device's memory after
  // the weights and the activation workspace (only on backends that report MemoryInfo).
  int32_t num_kv_blocks = 0;
  int32_t max_model_len = 0;  // 0: the model's context length
  float gpu_memory_utilization = 0.9f;
  // Largest step the engine schedules (sequences, tokens): the workspace is sized for it up front
  // on device backends, and decode graphs are recorded for batch sizes 1, 2, 4, 8, 16, 32, ... up
  // to max_num_seqs (rounded up to a multiple of 16).
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  // Run every step eagerly, even on a backend that can record graphs.
  bool enforce_eager = false;
  // vLLM's --calculate-kv-scales: on an fp8 KV cache, each layer's k_scale / v_scale come from the
  // first forward pass's data, max |K| / kKScaleRange and max |V| / kVScaleRange (vLLM's
  // K_SCALE_CONSTANT and V_SCALE_CONSTANT), K after RoPE, and replace the checkpoint's. A layer
  // whose maximum is 0 or not finite keeps its scale. Other caches ignore it.
  bool calculate_kv_scales = false;
  // Tests: after each Execute(), keep the sampled rows' logits on the host (last_sampled_logits()).
  bool keep_sampled_logits = false;
  // Structured outputs: let the engine compute the grammar masks while the forward pass runs
  // (AwaitsBitmaskFill). Unset: the backend's default (on where the forward is asynchronous, a
  // device backend; off on the host, whose forward already uses every core).
  std::optional<bool> overlap_grammar_masks;
};

// Logits of one forward pass on the host (ComputeLogits): the sampled sequences' rows, then the
// prompt-logit rows.
struct LogitsOutput {
  std::vector<float> logits;         // [num_sampled, vocab_size] fp32, sequence order
  std::vector<float> prompt_logits;  // [num_prompt_logit_rows, vocab_size] fp32
  int32_t vocab_size = 0;

  const float* row(int32_t i) const { return logits.data() + static_cast<size_t>(i) * vocab_size; }
  const float* prompt_row(int32_t i) const {
    return prompt_logits.data() + static_cast<size_t>(i) * vocab_size;
  }
};

class ModelRunner final : public ModelExecutor {
 public:
  // Uploads `weights` to `backend` and allocates the KV cache. Returns an error if the options are
  // invalid or memory cannot be had.
  static StatusOr<std::unique_ptr<ModelRunner>> Create(std::shared_ptr<const LlamaWeights> weights,
                                                       std::unique_ptr<Backend> backend,
                                                       const ModelRunnerOptions& options);
  ~ModelRunner() override;

  StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) override;
  bool AwaitsBitmaskFill() const override;
  void Release(const std::vector<uint64_t>& keys) override { sampling_.Release(keys); }
  // Requests whose sampling state the runner holds.
  size_t num_sampling_states() const { return sampling_.size(); }
  // The backend penalty-history slots the live requests hold (0 when the backend keeps none).
  size_t num_penalty_slots() const { return sampling_.num_penalty_slots(); }
  // The same forward pass (K/V written, prefix and all), returning the logits rather than tokens.
  // The batch needs no request keys; nothing is sampled and no sampling state changes.
  StatusOr<LogitsOutput> ComputeLogits(const ScheduledBatch& batch);
  // With options.keep_sampled_logits: the last Execute()'s sampled rows' logits,
  // [num_sampled, vocab_size] fp32.
  const std::vector<float>& last_sampled_logits() const { return last_sampled_logits_; }

  int32_t num_kv_blocks() const override { return options_.num_kv_blocks; }
  int32_t block_size() const override { return options_.block_size; }
  int32_t vocab_size() const override { return config_.vocab_size; }
  int32_t max_model_len() const override { return options_.max_model_len; }

  const ModelConfig& config() const { return config_; }
  Backend& backend() { return *backend_; }

  // Bytes of KV cache one token occupies (all layers, K and V) at `element_bytes` an element (4:
  // fp32, 2: bf16; Backend::KvCacheElementBytes).
  static int64_t KvBytesPerToken(const ModelConfig& config, int64_t element_bytes = 4);

  // The decode batch sizes graphs are recorded for, given max_num_seqs: 1, 2, 4, 8, then multiples
  // of 16 up to max_num_seqs rounded up to 16 (only those up to the first >= max_num_seqs).
  static std::vector<int32_t> GraphBatchSizes(int32_t max_num_seqs);
  // The ranges of ModelRunnerOptions::calculate_kv_scales (vLLM's defaults).
  static constexpr float kKScaleRange = 200.0f, kVScaleRange = 100.0f;
  // Each layer's fp8 KV-cache scales as the kernels get them: the checkpoint's, or once the first
  // step has run, calculated (calculate_kv_scales). [num_layers].
  std::vector<KvScales> kv_scales() const;

  // Number of decode graphs recorded so far.
  int32_t num_recorded_graphs() const { return static_cast<int32_t>(graph_ids_.size()); }

 private:
  struct LayerPtrs {
    const float* attn_norm;
    WeightRef wqkv;
    const float* bqkv;  // [q_dim + 2 * kv_dim]; nullptr: no bias
    WeightRef wo;
    const float* ffn_norm;
    WeightRef w13;
    WeightRef w2;
    void* k_cache;  // Backend::kv_cache_dtype() elements
    void* v_cache;
    KvScales kv_scales;  // the fp8 cache's per-tensor scales (LlamaLayerWeights)
  };
  // Device inputs of one forward pass.
  struct StepInputs {
    const int32_t* tokens;       // [num_tokens]
    const int64_t* slots;        // [num_tokens]
    const int32_t* sample_rows;  // [num_sampled] rows for the LM head (sampled + prompt-logit)
    int32_t num_sampled;
    AttentionMetadata meta;
  };

  ModelRunner(std::shared_ptr<const LlamaWeights> weights, std::unique_ptr<Backend> backend,
              const ModelRunnerOptions& options);
  Status Init();
  Status SizeKvCacheFromMemory();
  const float* Upload(const std::vector<float>& host);
  // host [rows, cols] row-major. REQUIRES: host.size() == rows * cols.
  WeightRef UploadMatrix(const std::vector<float>& host, int32_t rows, int32_t cols);
  // `quantized` when it has parts (the backend's UploadQuantMatrix), else `host` as above.
  WeightRef UploadMatrix(const std::vector<float>& host, const QuantizedMatrix& quantized,
                         int32_t rows, int32_t cols);
  Status EnsureWorkspace(int32_t num_tokens, int32_t num_seqs, int32_t num_sampled,
                         int32_t max_blocks_per_seq);
  // One step's device inputs, packed into one buffer (and staged in one host buffer) in this
  // order, each part 16-byte aligned: slots int64 [n], tokens [n], positions [n], query_start
  // [seqs + 1], sample rows [rows], the block tables' row stride [1], the block tables
  // [table_entries] (last: a graph's parts stay put whatever table width a step uploads).
  struct InputLayout {
    size_t slots, tokens, positions, query_start, sample_rows, table_stride, block_tables, bytes;
  };
  static InputLayout LayoutInputs(int32_t n, int32_t seqs, int32_t rows, size_t table_entries);
  // Grows the staging buffer to at least `bytes`; false if the memory cannot be had.
  bool GrowStaging(size_t bytes);
  // The staging buffer, once no copy from it can still be pending; nullptr on a device error
  // (*status says which).
  char* Staging(Status* status);
  // Uploads the first `bytes` of the staging buffer to `device` (one copy).
  void UploadStaged(void* device, size_t bytes);
  // Issues the ops of one forward pass; the logits of the sampled rows land in logits_.
  void Forward(const StepInputs& in);
  // Layer `l`'s RoPE and K/V write in the step that calculates the fp8 scales: RoPE, the maxima of
  // the step's K and V rows (one wait for the device), the scales, then the write with them.
  void RopeAndWriteKvCalculatingScales(int32_t l, float* q, float* k, float* v,
                                       const StepInputs& in);
  // Where a step left its logits in logits_: the row of each sampled sequence, and the first of
  // the prompt-logit rows (which follow one another).
  struct StepRows {
    std::vector<int32_t> sampled;
    int32_t first_prompt_row = 0;
  };
  // Runs the forward pass of `batch`; the logits of the rows it names land in logits_.
  Status RunStep(const ScheduledBatch& batch, StepRows* rows);
  // A pure decode step through a recorded graph (recorded now if its batch size has none yet).
  Status RunDecodeGraph(const ScheduledBatch& batch, StepRows* rows);
  LogitsOutput CopyLogits(const ScheduledBatch& batch, const StepRows& rows);

  const ModelConfig config_;
  SamplingStateTable sampling_;
  std::vector<float> last_sampled_logits_;
  // Held only until Init() has copied the weights into the backend's memory (which, on the CPU,
  // is 2 MiB-aligned and backed by huge pages); dropped after, so the runner keeps one copy.
  std::shared_ptr<const LlamaWeights> weights_;
  std::shared_ptr<const void> weight_storage_;  // what quantized weights point into (mapped file)
  std::unique_ptr<Backend> backend_;
  ModelRunnerOptions options_;

  std::vector<DeviceBuffer> weight_buffers_;  // norms (fp32)
  std::vector<void*> matrix_buffers_;         // UploadWeight results, freed with Deallocate
  WeightRef embedding_;
  const float* final_norm_ = nullptr;
  WeightRef lm_head_;
  const float* rope_inv_freq_ = nullptr;  // [head_dim / 2]
  std::vector<LayerPtrs> layers_;
  DeviceBuffer kv_cache_;
  // calculate_kv_scales on an fp8 cache, until a step has run: the next forward pass calculates
  // the scales (eagerly: no graph step before it). abs_max_ holds the two maxima.
  bool kv_scales_pending_ = false;
  DeviceBuffer abs_max_;

  // Workspace, grown on demand: capacity in tokens / sequences / sampled rows / table entries.
  int32_t cap_tokens_ = 0, cap_seqs_ = 0, cap_sampled_ = 0, cap_table_ = 0;
  DeviceBuffer x_, xb_, qkv_, att_, delta_, gate_up_, hidden_, sampled_x_, logits_;
  DeviceBuffer d_inputs_;  // InputLayout of the capacities above
  // The host side of every step's upload (Backend::AllocateHostStaging: pinned on CUDA, so the
  // step's inputs go up in one asynchronous copy); staging_pending_ while a copy may read it.
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  bool staging_pending_ = false;

  // Decode graphs: a fixed input buffer for the largest graph batch, and the recorded graph per
  // batch size. Graphs point at the workspace above: they are dropped whenever it grows.
  bool use_graphs_ = false;
  std::vector<int32_t> graph_sizes_;
  int32_t graph_table_width_ = 0;
  DeviceBuffer g_inputs_;  // InputLayout of the largest graph batch, graph_table_width_ wide
  std::vector<std::pair<int32_t, int32_t>> graph_ids_;  // (batch size, graph id)
};

}  // namespace tinyserve
