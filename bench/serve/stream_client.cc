#include "bench/serve/stream_client.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

namespace tinyserve::bench {

StatusOr<Target> ParseTarget(const std::string& base_url, const std::string& endpoint) {
  const std::string scheme = "http://";
  if (base_url.compare(0, scheme.size(), scheme) != 0) {
    return InvalidArgument("--base-url must start with http:// (https is not supported): " +
                           base_url);
  }
  Target t;
  std::string rest = base_url.substr(scheme.size());
  std::string base_path;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    base_path = rest.substr(slash);
    rest.resize(slash);
  }
  while (!base_path.empty() && base_path.back() == '/') base_path.pop_back();
  t.host = rest;
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    t.host = rest.substr(0, colon);
    const std::string port = rest.substr(colon + 1);
    if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
        port.size() > 5) {
      return InvalidArgument("bad port in --base-url: " + base_url);
    }
    t.port = std::stoi(port);
  }
  if (t.host.empty()) return InvalidArgument("no host in --base-url: " + base_url);
  if (endpoint != "/v1/completions" && endpoint != "/v1/chat/completions") {
    return InvalidArgument("--endpoint must be /v1/completions or /v1/chat/completions, not " +
                           endpoint);
  }
  t.is_chat = endpoint == "/v1/chat/completions";
  t.path = base_path + endpoint;
  return t;
}

StatusOr<std::string> BuildRequestBody(const Target& target, const std::string& model,
                                       const BenchPrompt& prompt, bool ignore_eos,
                                       const SamplingOverrides& sampling) {
  nlohmann::json body = {
      {"model", model}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  if (sampling.temperature) body["temperature"] = *sampling.temperature;
  if (sampling.top_p) body["top_p"] = *sampling.top_p;
  if (sampling.top_k) body["top_k"] = *sampling.top_k;
  if (sampling.min_p) body["min_p"] = *sampling.min_p;
  if (sampling.frequency_penalty) body["frequency_penalty"] = *sampling.frequency_penalty;
  if (sampling.presence_penalty) body["presence_penalty"] = *sampling.presence_penalty;
  if (sampling.repetition_penalty) body["repetition_penalty"] = *sampling.repetition_penalty;
  if (target.is_chat) {
    if (!prompt.token_ids.empty()) {
      return InvalidArgument("the chat endpoint needs text prompts, not token ids");
    }
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt.text}}});
    body["max_completion_tokens"] = prompt.output_len;
  } else {
    if (prompt.token_ids.empty()) {
      body["prompt"] = prompt.text;
    } else {
      body["prompt"] = prompt.token_ids;
    }
    body["max_tokens"] = prompt.output_len;
  }
  if (ignore_eos) body["ignore_eos"] = true;
  return body.dump();
}

StreamClient::StreamClient(const Target& target, const Clock* clock)
    : target_(target),
      clock_(clock),
      http_(std::make_unique<httplib::Client>(target.host, target.port)) {
  http_->set_tcp_nodelay(true);
  http_->set_keep_alive(true);
  http_->set_connection_timeout(10, 0);
  const auto secs = static_cast<time_t>(target.timeout_s);
  const auto usecs = static_cast<time_t>((target.timeout_s - static_cast<double>(secs)) * 1e6);
  http_->set_read_timeout(secs, usecs);
  http_->set_write_timeout(secs, usecs);
}

StreamClient::~StreamClient() = default;

RequestRecord StreamClient::Send(const std::string& body) {
  RequestRecord record;
  StreamRecorder recorder(&record, clock_);
  SseParser parser;
  std::string error_body;
  httplib::Request req;
  req.method = "POST";
  req.path = target_.path;
  req.headers = {{"Accept", "text/event-stream"}};
  if (!target_.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + target_.api_key);
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&record](const httplib::Response& res) {
    record.http_status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (record.http_status != 200) {
      if (error_body.size() < 1000) error_body.append(data, std::min<size_t>(n, 1000));
      return true;
    }
    parser.Feed(std::string_view(data, n),
                [&recorder](std::string_view payload) { return recorder.OnPayload(payload); });
    return record.error.empty();  // after [DONE], read the response's end: keep-alive
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  record.start_s = clock_->Now();
  const bool sent = http_->send(req, res, err);
  if (!recorder.done()) record.end_s = clock_->Now();
  if (record.http_status != 0 && record.http_status != 200) {
    record.error = "HTTP " + std::to_string(record.http_status) + ": " + error_body;
  } else if (!record.error.empty()) {
    // recorded by the stream (server error or malformed payload)
  } else if (!sent && !recorder.done()) {
    record.error = std::string("HTTP client: ") + httplib::to_string(err);
  } else if (!recorder.done()) {
    record.error = "the stream ended without data: [DONE]";
  } else if (record.chunk_s.empty()) {
    record.error = "the stream had no content";
  }
  if (!recorder.done() || !record.error.empty()) http_->stop();  // do not reuse the connection
  record.success = record.error.empty();
  if (!record.usage_reported) record.output_len = recorder.num_chunks();
  return record;
}

}  // namespace tinyserve::bench
