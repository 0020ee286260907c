#include "bench/serve/arrivals.h"

#include <cmath>
#include <random>

namespace tinyserve::bench {

StatusOr<std::vector<double>> ArrivalOffsets(int num_requests, double rate, double burstiness,
                                             uint64_t seed) {
  if (!(rate > 0.0)) return InvalidArgument("--request-rate must be > 0 (or inf)");
  if (!(burstiness > 0.0)) return InvalidArgument("--burstiness must be > 0");
  std::vector<double> offsets(static_cast<size_t>(std::max(0, num_requests)), 0.0);
  if (std::isinf(rate)) return offsets;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  for (size_t i = 1; i < offsets.size(); ++i) offsets[i] = offsets[i - 1] + gap(rng);
  return offsets;
}

}  // namespace tinyserve::bench
