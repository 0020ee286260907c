// Arrival schedules for `tinyserve bench serve` (as vLLM's `--request-rate` and `--burstiness`):
// request i is sent at offset[i] seconds after the benchmark starts. offset[0] = 0 and the gaps
// between consecutive requests are independent Gamma(shape = burstiness, scale = 1 / (rate *
// burstiness)) draws, so their mean is 1 / rate whatever the burstiness; burstiness 1 is a Poisson
// process (exponential gaps), < 1 burstier, > 1 more uniform (the gaps' coefficient of variation is
// 1 / sqrt(burstiness)). rate = +inf sends everything at once (all offsets 0). Seeded
// (std::mt19937_64): the same seed gives the same schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace tinyserve::bench {

// REQUIRES nothing; returns InvalidArgument if rate <= 0 or burstiness <= 0.
StatusOr<std::vector<double>> ArrivalOffsets(int num_requests, double rate, double burstiness,
                                             uint64_t seed);

}  // namespace tinyserve::bench
