// StreamClient: sends one streaming OpenAI request at a time over a keep-alive HTTP/1.1 connection
// (cpp-httplib, TCP_NODELAY) and records it (stream_record.h). The load generator runs one
// StreamClient per in-flight request, each on its own thread: blocking reads cost one thread per
// stream, which is fine for hundreds of streams (bench/RESULTS.md has the parser's cost per
// token). Also: the target's address (ParseTarget) and the request bodies (BuildRequestBody).
// One StreamClient per thread; the Clock must be thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/clock.h"
#include "base/status.h"
#include "bench/serve/dataset.h"
#include "bench/serve/stream_record.h"

namespace httplib {
class Client;
}

namespace tinyserve::bench {

struct Target {
  std::string host;
  int port = 80;
  std::string path;      // base path + endpoint, e.g. "/v1/completions"
  bool is_chat = false;  // endpoint ends in /chat/completions
  std::string api_key;   // sent as "Authorization: Bearer ..." when not empty
  double timeout_s = 600.0;
};

// Parses `http://host[:port][/base]` and joins the endpoint (/v1/completions or
// /v1/chat/completions). InvalidArgument for another scheme (https is not supported) or endpoint.
StatusOr<Target> ParseTarget(const std::string& base_url, const std::string& endpoint);

// vLLM bench's sampling flags (--temperature, --top-p, ...): each is sent only when given, so
// without --temperature the server's default applies (vLLM no longer forces temperature 0).
struct SamplingOverrides {
  std::optional<double> temperature, top_p, min_p, frequency_penalty, presence_penalty,
      repetition_penalty;
  std::optional<int> top_k;
};

// The JSON body of one streaming request (vLLM bench's fields: stream, usage, and the sampling
// overrides given). Chat endpoints need a text prompt (InvalidArgument for token ids).
StatusOr<std::string> BuildRequestBody(const Target& target, const std::string& model,
                                       const BenchPrompt& prompt, bool ignore_eos,
                                       const SamplingOverrides& sampling = {});

class StreamClient {
 public:
  StreamClient(const Target& target, const Clock* clock);
  ~StreamClient();

  // Sends `body` and reads the stream to its end. Never fails as a call: failures are recorded in
  // the returned record (success == false, error says why).
  RequestRecord Send(const std::string& body);

 private:
  Target target_;
  const Clock* clock_;
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace tinyserve::bench
