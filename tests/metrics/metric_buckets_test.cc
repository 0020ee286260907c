// BucketIndex (branch-free) agrees with std::lower_bound, i.e. Prometheus `le` semantics.
#include "metrics/metric_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace tinyserve {
namespace {

TEST(MetricBucketsTest, BucketIndexIsLowerBound) {
  const std::vector<std::vector<double>> all = {TtftBuckets(),
                                                TokenLatencyBuckets(),
                                                RequestLatencyBuckets(),
                                                OneTwoFiveBuckets(512),
                                                IterationTokensBuckets(),
                                                PreemptionCountBuckets(),
                                                ParamsNBuckets(),
                                                {1.0},
                                                {}};
  for (const std::vector<double>& b : all) {
    std::vector<double> values = {-1.0, 0.0, 1e9, std::nan("")};
    for (double x : b) {
      values.push_back(x);
      values.push_back(std::nextafter(x, -1e300));
      values.push_back(std::nextafter(x, 1e300));
    }
    for (double v : values) {
      const size_t want = static_cast<size_t>(std::lower_bound(b.begin(), b.end(), v) - b.begin());
      if (std::isnan(v)) continue;  // lower_bound's answer is meaningless for NaN
      EXPECT_EQ(BucketIndex(b, v), want) << "value " << v << " over " << b.size() << " bounds";
    }
  }
}

}  // namespace
}  // namespace tinyserve
