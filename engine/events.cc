#include "engine/events.h"

namespace tinyserve {

const char* EventTypeName(EventType type) {
  switch (type) {
    case EventType::kQueued:
      return "QUEUED";
    case EventType::kScheduled:
      return "SCHEDULED";
    case EventType::kPreempted:
      return "PREEMPTED";
    case EventType::kNewTokens:
      return "NEW_TOKENS";
    case EventType::kFinished:
      return "FINISHED";
  }
  return "UNKNOWN";
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

}  // namespace tinyserve
