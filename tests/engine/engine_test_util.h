// Helpers for EngineCore tests: a recording observer, request builders, and the submit / step /
// drain loop every harness runs.
#pragma once

#include <gtest/gtest.h>
#include <cstdint>

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_core.h"
#include "engine/engine_observer.h"
#include "engine/events.h"

namespace tinyserve {

inline void PrintTo(const RequestEvent& e, std::ostream* os) {
  *os << EventTypeName(e.type) << "@" << e.ts;
  if (e.type == EventType::kNewTokens) *os << "(" << e.num_tokens << ")";
  if (e.type == EventType::kFinished) *os << "(" << FinishReasonName(e.finish_reason) << ")";
}

namespace testing {

inline RequestEvent Queued(double ts) { return {EventType::kQueued, ts, 0, FinishReason::kNone}; }
inline RequestEvent Scheduled(double ts) {
  return {EventType::kScheduled, ts, 0, FinishReason::kNone};
}
inline RequestEvent Preempted(double ts) {
  return {EventType::kPreempted, ts, 0, FinishReason::kNone};
}
inline RequestEvent Tokens(double ts, int32_t n = 1) {
  return {EventType::kNewTokens, ts, n, FinishReason::kNone};
}
inline RequestEvent Finished(double ts, FinishReason reason) {
  return {EventType::kFinished, ts, 0, reason};
}

// Records every event per request id, every step's token outputs (request ids and time), and every
// step's stats; at FINISHED, the request's number of PREEMPTED events.
class RecordingObserver : public EngineObserver {
 public:
  void OnRequestEvent(const RequestRecord& request, const RequestEvent& event) override {
    const std::string id(request.request_id);
    if (event.type == EventType::kQueued) id_of_key[request.key] = id;
    events[id].push_back(event);
    if (event.type == EventType::kPreempted) ++preempted_[id];
    if (event.type == EventType::kFinished) num_preemptions[id] = preempted_[id];
  }
  void OnTokenOutputs(const TokenOutputs& outputs) override {
    std::vector<std::string> ids;
    for (uint64_t key : outputs.request_keys) ids.push_back(id_of_key.at(key));
    token_outputs.emplace_back(outputs.ts, std::move(ids));
  }
  void OnStep(const SchedulerStats& stats) override { steps.push_back(stats); }

  std::map<std::string, std::vector<RequestEvent>> events;
  std::map<std::string, int32_t> num_preemptions;
  std::map<uint64_t, std::string> id_of_key;
  std::vector<std::pair<double, std::vector<std::string>>> token_outputs;  // per output step
  std::vector<SchedulerStats> steps;

 private:
  std::map<std::string, int32_t> preempted_;
};

inline EngineRequest MakeEngineRequest(const std::string& id, std::vector<int32_t> prompt,
                                       int32_t max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

// core.Submit(r); a refusal fails the test and gives nullptr.
inline std::shared_ptr<RequestStream> SubmitOk(EngineCore& core, EngineRequest r) {
  StatusOr<std::shared_ptr<RequestStream>> s = core.Submit(std::move(r));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}

// Steps `core` on this thread until it has no pending work (at most 10,000 steps, else the test
// fails).
inline void RunUntilIdle(EngineCore& core) {
  for (int i = 0; i < 10000 && core.HasPendingWork(); ++i) core.Step();
  ASSERT_FALSE(core.HasPendingWork());
}

// Everything `s` holds now, appended into one output.
inline RequestOutput Drain(RequestStream& s) {
  RequestOutput all;
  RequestOutput delta;
  while (s.TryNext(&delta)) all.Append(delta);
  return all;
}

// prefix + decimal i ("r12"), without operator+ (g++ 12 -Wrestrict false positive, PR 105329).
inline std::string Name(const std::string& prefix, int i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

// A prompt of `n` tokens in [1, vocab) that depends on `salt`.
inline std::vector<int32_t> Prompt(int32_t n, int32_t salt, int32_t vocab = 32) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back(1 + (salt * 13 + i * 7) % (vocab - 1));
  return p;
}

}  // namespace testing
}  // namespace tinyserve
