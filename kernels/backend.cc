// The Backend ops with a default implementation: sampling and scoring on the host.
#include <algorithm>
#include <memory>
#include <new>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_sampler.h"

namespace tinyserve {
namespace {

// One sampler per thread (the engine thread drives a backend), re-made when the vocabulary changes.
CpuSampler& HostSampler(int32_t vocab) {
  thread_local std::unique_ptr<CpuSampler> sampler;
  if (sampler == nullptr || sampler->vocab_size() != vocab) {
    sampler = std::make_unique<CpuSampler>(vocab);
  }
  return *sampler;
}

// The rows on the host: in place on a host backend, else copied into a per-thread buffer.
StatusOr<const float*> HostRows(Backend& b, const float* logits, int32_t vocab, int32_t n) {
  if (b.is_host()) return logits;
  thread_local std::vector<float> copy;
  copy.resize(static_cast<size_t>(n) * vocab);
  b.CopyToHost(copy.data(), logits, copy.size() * sizeof(float));
  TS_RETURN_IF_ERROR(b.Synchronize());
  return copy.data();
}

}  // namespace

void* Backend::AllocateHostStaging(size_t bytes) {
  return ::operator new (std::max<size_t>(bytes, 1), std::align_val_t{64}, std::nothrow);
}
void Backend::FreeHostStaging(void* ptr) {
  if (ptr != nullptr) ::operator delete (ptr, std::align_val_t{64});
}

WeightRef Backend::UploadQuantMatrix(const QuantPart* parts, int32_t num_parts, int32_t cols) {
  int64_t rows = 0;
  for (int32_t p = 0; p < num_parts; ++p) rows += parts[p].rows;
  std::vector<float> host(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  float* out = host.data();
  for (int32_t p = 0; p < num_parts; ++p) {
    const auto* blocks = static_cast<const uint8_t*>(parts[p].blocks);
    const size_t row_bytes = QuantRowBytes(parts[p].type, cols);
    for (int32_t r = 0; r < parts[p].rows; ++r, out += cols) {
      DequantizeRow(parts[p].type, blocks + row_bytes * r, cols, out);
    }
  }
  return UploadMatrix(host.data(), static_cast<int32_t>(rows), cols);
}

Status Backend::SampleRows(const float* logits, int32_t vocab, const SampleRow* rows, int32_t n,
                           TokenLogprobs* out) {
  if (n == 0) return Status::Ok();
  StatusOr<const float*> host = HostRows(*this, logits, vocab, n);
  if (!host.ok()) return host.status();
  CpuSampler& sampler = HostSampler(vocab);
  for (int32_t i = 0; i < n; ++i) {
    const float* row = *host + static_cast<size_t>(i) * vocab;
    out[i].token_id = sampler.Sample(rows[i], row, &out[i]);
    if (rows[i].spec->num_logprobs < 0) {
      out[i].logprob = 0.0f;
      out[i].rank = 0;
      out[i].top.clear();
    }
  }
  return Status::Ok();
}

Status Backend::ScoreRows(const float* logits, int32_t vocab, const int32_t* targets,
                          const int32_t* num_top, int32_t n, TokenLogprobs* out) {
  if (n == 0) return Status::Ok();
  StatusOr<const float*> host = HostRows(*this, logits, vocab, n);
  if (!host.ok()) return host.status();
  CpuSampler& sampler = HostSampler(vocab);
  for (int32_t i = 0; i < n; ++i) {
    sampler.FillLogprobs(*host + static_cast<size_t>(i) * vocab, targets[i], num_top[i], &out[i]);
  }
  return Status::Ok();
}

}  // namespace tinyserve
