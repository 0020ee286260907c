// RunBenchmark: sends a dataset's prompts to a server on an arrival schedule (arrivals.h) and
// records every stream (stream_client.h), as `vllm bench serve` does.
//
// A dispatcher releases request i at offset[i] after the start; a pool of worker threads, each
// with its own StreamClient (a keep-alive connection), sends them. The pool grows on demand up to
// --max-concurrency workers (or one per request when unlimited), so a request that is due while
// every allowed worker is busy waits for one, as under vLLM's semaphore, and its TTFT starts when
// it is actually sent.
//
// Clock calls, in order (a scripted clock in the tests relies on it, with max_concurrency 1 and an
// infinite rate): the start, then per request its send, each content chunk and its end, then the
// end of the benchmark.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "bench/serve/dataset.h"
#include "bench/serve/stream_client.h"
#include "bench/serve/stream_record.h"

namespace tinyserve::bench {

struct RunOptions {
  Target target;
  std::string model;
  bool ignore_eos = false;
  SamplingOverrides sampling;  // sent only where given
  double request_rate = 0;     // requests/s; +inf sends all at once
  double burstiness = 1.0;
  uint64_t seed = 0;
  int max_concurrency = 0;  // 0: unlimited
  bool progress = false;    // a progress bar on stderr
};

struct RunResult {
  std::vector<RequestRecord> records;  // in dataset order
  double start_s = 0, end_s = 0;       // the clock at the start and the end
};

// Sends the first `num_warmup` prompts (cycling), one at a time, and forgets them. Unavailable if
// one fails. Run it before the /metrics snapshot so that the server's view excludes it.
Status RunWarmup(const RunOptions& options, const std::vector<BenchPrompt>& prompts, int num_warmup,
                 const Clock& clock);

// Returns InvalidArgument for bad options or a prompt the endpoint cannot take; failed requests
// are recorded, not returned as errors.
StatusOr<RunResult> RunBenchmark(const RunOptions& options, const std::vector<BenchPrompt>& prompts,
                                 const Clock& clock);

}  // namespace tinyserve::bench
