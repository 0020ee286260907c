// The hand-written JSON of the streaming hot path (json_writer.h, StreamChunks) against nlohmann's
// dump: arbitrary bytes as a string and as a stream chunk's text, and the first 8 bytes as a
// double, must come out byte for byte the same.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "base/json_writer.h"
#include "fuzz/fuzz_util.h"
#include "server/protocol/responses.h"
#include "server/protocol/stream_chunks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tinyserve;
  using namespace tinyserve::protocol;
  using Json = nlohmann::ordered_json;
  const std::string bytes(reinterpret_cast<const char*>(data), size);

  std::string out;
  AppendJsonString(bytes, &out);
  FUZZ_CHECK(out == DumpJson(Json(bytes)));

  const ResponseMeta meta{"cmpl-" + bytes.substr(0, 8), 1700000000, bytes.substr(size / 2)};
  const StreamChunks chunks(meta, StreamChunks::Kind::kCompletion);
  const CompletionChoice choice{
      static_cast<int32_t>(size), bytes, nullptr, tinyserve::FinishReason::kNone, {}};
  out.clear();
  chunks.AppendCompletionChunk(choice, Usage{3, static_cast<int32_t>(size)}, &out);
  FUZZ_CHECK(out ==
             SseData(CompletionChunkJson(meta, choice, Usage{3, static_cast<int32_t>(size)})));

  if (size >= sizeof(double)) {
    double x = 0;
    std::memcpy(&x, data, sizeof(x));
    out.clear();
    AppendJsonDouble(x, &out);
    FUZZ_CHECK(out == Json(x).dump());
  }
  return 0;
}
