#include "metrics/metric_buckets.h"

namespace tinyserve {

std::vector<double> TtftBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,  0.1,   0.25,  0.5,
          0.75,   1.0,     2.5,    5.0,   7.5,   10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> TokenLatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,
          0.3,    0.4,     0.5,    0.75,  1.0,    2.5,   5.0,  7.5,   10.0, 20.0,  40.0, 80.0};
}

std::vector<double> RequestLatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01,  0.025, 0.05,  0.1,   0.2,    0.3,   0.5,
          0.8,   1.0,    1.5,   2.0,   2.5,   5.0,   10.0,  15.0,   20.0,  30.0,
          40.0,  50.0,   60.0,  120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

std::vector<double> OneTwoFiveBuckets(int64_t max_value) {
  std::vector<double> buckets;
  static constexpr int64_t kMantissas[] = {1, 2, 5};
  for (int64_t exponent = 1;; exponent *= 10) {
    for (int64_t m : kMantissas) {
      const int64_t value = m * exponent;
      if (value > max_value) {
        if (buckets.empty()) buckets.push_back(1.0);
        return buckets;
      }
      buckets.push_back(static_cast<double>(value));
    }
  }
}

std::vector<double> IterationTokensBuckets() {
  std::vector<double> buckets = {1.0};
  for (int64_t v = 8; v <= 16384; v *= 2) buckets.push_back(static_cast<double>(v));
  return buckets;
}

std::vector<double> PreemptionCountBuckets() { return {0, 1, 2, 3, 5, 10, 20, 50}; }

std::vector<double> ParamsNBuckets() { return {1, 2, 5, 10, 20}; }

}  // namespace tinyserve
