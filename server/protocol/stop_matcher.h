// StopMatcher: finds a sequence's stop strings in its detokenized text, across token boundaries.
//
// Feed() takes each text delta (from IncrementalDetokenizer, so always whole characters) and
// returns the part that is final: text that is, or could still become, the start of a stop string
// is held back, so nothing streamed ever has to be retracted. When a stop string appears, the text
// before it is returned (plus the stop string itself iff include_stop_str_in_output, vLLM's
// option), everything after it is dropped, and stopped() becomes true: the frontend then aborts
// the engine request and reports finish_reason "stop", stop_reason = the matched string. When
// several stop strings match, the one that starts first wins; at equal starts, the longer one.
// If the sequence ends otherwise, Flush() returns the held-back text.
//
// Single-owner (one per generated sequence). With no stop strings, Feed() returns its input.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tinyserve::protocol {

class StopMatcher {
 public:
  // REQUIRES: no empty string in `stop` (the parsers reject them).
  explicit StopMatcher(std::vector<std::string> stop, bool include_stop_str_in_output = false);

  // Returns the text that can be emitted after `delta`. After a stop, returns "" for any delta.
  std::string Feed(std::string_view delta);
  // Returns the held-back text and clears it ("" after a stop). Call once at the end.
  std::string Flush();

  // Returns true iff a stop string was found.
  bool stopped() const { return stopped_; }
  // The stop string that matched. REQUIRES: stopped().
  const std::string& matched() const { return stop_[matched_index_]; }
  // The bytes held back now.
  const std::string& held_back() const { return held_; }

 private:
  // The length of the longest suffix of held_ that is a proper prefix of a stop string.
  size_t PartialMatchLength() const;

  const std::vector<std::string> stop_;
  const bool include_stop_str_in_output_;
  std::string held_;
  bool stopped_ = false;
  size_t matched_index_ = 0;
};

}  // namespace tinyserve::protocol
