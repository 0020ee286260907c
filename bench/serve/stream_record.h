// What the load generator measures about one streamed request, and the lean parsing that fills it.
//
// SseParser splits a byte stream into Server-Sent-Events `data:` payloads (lines ending in \n or
// \r\n; an empty line ends an event; comments `:` and other fields are skipped). StreamRecorder
// turns payloads into a RequestRecord: a payload whose first choice carries non-empty text
// (`choices[0].text`, completions) or content (`choices[0].delta.content` or `reasoning_content`,
// chat) is a *content chunk*, stamped with the clock when it is parsed. Chunks without text (the
// chat role chunk, the final chunk with only finish_reason, SSE pings) are not: TTFT is the first
// content chunk. A `usage` object gives the exact prompt and completion token counts (the client
// asks for it with stream_options.include_usage); without one the output token count is the
// number of content chunks (vLLM instead re-tokenizes the text; tinyserve has no tokenizer on the
// client side). An `error` object or `data: [DONE]` ends the stream.
// Single-owner; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"

namespace tinyserve::bench {

struct RequestRecord {
  int index = 0;           // position in the dataset
  bool success = false;    // HTTP 200, at least one content chunk, no error, stream completed
  std::string error;       // why not (empty on success)
  int http_status = 0;     // 0: no response
  int32_t prompt_len = 0;  // tokens sent: the server's usage, else the dataset's count
  int32_t output_len = 0;  // tokens received: usage.completion_tokens, else content chunks
  bool usage_reported = false;
  int32_t requested_output_len = 0;  // max_tokens asked for
  double start_s = 0.0;              // clock when the request was sent
  std::vector<double> chunk_s;       // clock at each content chunk
  double end_s = 0.0;                // clock when the stream ended ([DONE] or end of response)
  std::string generated_text;
};

class SseParser {
 public:
  // Feeds bytes; calls on_data(payload) for each complete event with a data field (multi-line
  // data joined by '\n'). Returns false as soon as on_data returns false.
  template <typename OnData>
  bool Feed(std::string_view bytes, OnData&& on_data) {
    buffer_.append(bytes.data(), bytes.size());
    size_t pos = 0;
    bool keep_going = true;
    while (keep_going) {
      const size_t nl = buffer_.find('\n', pos);
      if (nl == std::string::npos) break;
      std::string_view line(buffer_.data() + pos, nl - pos);
      pos = nl + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) {
        if (has_data_) keep_going = on_data(std::string_view(data_));
        data_.clear();
        has_data_ = false;
      } else if (line.substr(0, 5) == "data:") {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        if (has_data_) data_.push_back('\n');
        data_.append(line.data(), line.size());
        has_data_ = true;
      }
    }
    buffer_.erase(0, pos);
    return keep_going;
  }

 private:
  std::string buffer_;  // bytes after the last complete line
  std::string data_;    // the current event's data
  bool has_data_ = false;
};

class StreamRecorder {
 public:
  // `record` and `clock` must outlive the recorder.
  StreamRecorder(RequestRecord* record, const Clock* clock) : record_(record), clock_(clock) {}

  // Handles one SSE data payload. Returns false once the stream has ended ([DONE] or an error).
  bool OnPayload(std::string_view payload);
  bool done() const { return done_; }
  int num_chunks() const { return static_cast<int>(record_->chunk_s.size()); }

 private:
  RequestRecord* record_;
  const Clock* clock_;
  bool done_ = false;
};

}  // namespace tinyserve::bench
