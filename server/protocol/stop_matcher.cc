#include "server/protocol/stop_matcher.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace tinyserve::protocol {

StopMatcher::StopMatcher(std::vector<std::string> stop, bool include_stop_str_in_output)
    : stop_(std::move(stop)), include_stop_str_in_output_(include_stop_str_in_output) {
  for ([[maybe_unused]] const auto& s : stop_) assert(!s.empty());
}

std::string StopMatcher::Feed(std::string_view delta) {
  if (stopped_) return {};
  if (stop_.empty()) return std::string(delta);
  held_.append(delta);
  // The earliest match (ties: the longest). A match lies in held_ + delta only if it ends in delta:
  // held_ never contains a whole stop string.
  size_t best_at = std::string::npos;
  for (size_t i = 0; i < stop_.size(); ++i) {
    size_t at = held_.find(stop_[i]);
    if (at == std::string::npos) continue;
    if (best_at == std::string::npos || at < best_at ||
        (at == best_at && stop_[i].size() > stop_[matched_index_].size())) {
      best_at = at;
      matched_index_ = i;
    }
  }
  if (best_at != std::string::npos) {
    stopped_ = true;
    size_t end = best_at + (include_stop_str_in_output_ ? stop_[matched_index_].size() : 0);
    std::string out = held_.substr(0, end);
    held_.clear();
    return out;
  }
  size_t keep = PartialMatchLength();
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

size_t StopMatcher::PartialMatchLength() const {
  size_t longest = 0;
  for (const auto& s : stop_) {
    size_t max_k = std::min(held_.size(), s.size() - 1);
    for (size_t k = max_k; k > longest; --k) {
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(s).substr(0, k)) {
        longest = k;
        break;
      }
    }
  }
  return longest;
}

}  // namespace tinyserve::protocol
