// The include-arrow check (DESIGN §1) over the real source tree, and over a scratch tree with
// deliberate violations, which shows the checker can fail and names each one exactly.
#include "tests/arrows/include_arrows.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

namespace tinyserve::arrows {
namespace {

namespace fs = std::filesystem;

TEST(IncludeArrowsTest, TheSourceTreeKeepsEveryArrow) {
  int num_files = 0;
  const std::vector<Violation> violations = CheckTree(TINYSERVE_SOURCE_DIR, &num_files);
  EXPECT_GT(num_files, 300);  // the walk found the tree
  for (const Violation& v : violations) ADD_FAILURE() << v.ToString();
}

TEST(IncludeArrowsTest, ParsesQuotedAndAngledIncludesWithTheirLines) {
  const std::vector<Include> includes = ParseIncludes(
      "// #include \"engine/no.h\" in a comment\n"
      "#include \"engine/a.h\"\n"
      "  #  include <vector>\n"
      "#include\t\"kernels/b.h\"  // trailing\n"
      "#define X \"engine/c.h\"\n"
      "#include \"unterminated\n"
      "#include_next <dlfcn.h>\n");
  ASSERT_EQ(includes.size(), 3u);
  EXPECT_EQ(includes[0].line, 2);
  EXPECT_EQ(includes[0].target, "engine/a.h");
  EXPECT_EQ(includes[1].line, 3);
  EXPECT_EQ(includes[1].target, "vector");
  EXPECT_EQ(includes[2].line, 4);
  EXPECT_EQ(includes[2].target, "kernels/b.h");
}

TEST(IncludeArrowsTest, PartsAreTheTopFoldersAndBenchServe) {
  EXPECT_EQ(PartOf("kernels/cuda/sampling.cu"), "kernels");
  EXPECT_EQ(PartOf("models/tokenizer/gguf.h"), "models");
  EXPECT_EQ(PartOf("server/protocol/responses.h"), "server");
  EXPECT_EQ(PartOf("bench/serve/runner.h"), "bench/serve");
  EXPECT_EQ(PartOf("bench/decode_bench.cc"), "bench");
  EXPECT_EQ(PartOf("base/status.h"), "base");
  EXPECT_EQ(PartOf("structured/grammar.h"), "structured");
  EXPECT_EQ(PartOf("basement/x.h"), "");
  EXPECT_EQ(PartOf("vector"), "");
  EXPECT_EQ(PartOf("nlohmann/json.hpp"), "");
}

void Write(const fs::path& root, const std::string& path, const std::string& text) {
  fs::create_directories((root / path).parent_path());
  std::ofstream(root / path) << text;
}

// A scratch tree with one file per rule, bad and good includes mixed: the checker reports exactly
// the bad ones, by file and line.
TEST(IncludeArrowsTest, AScratchTreeWithForbiddenIncludesReportsEachOne) {
  const fs::path root =
      fs::path(testing::TempDir()) / ("include_arrows_" + std::to_string(getpid()));
  fs::remove_all(root);
  Write(root, "engine/scheduler.h", "#pragma once\n#include \"base/status.h\"\n");
  Write(root, "engine/local.cc", "#include \"scheduler.h\"\n#include \"engine/scheduler.h\"\n");
  Write(root, "engine/x.cc", "#include \"kernels/backend.h\"\n#include \"../kernels/backend.h\"\n");
  Write(root, "kernels/bad.cc", "// a kernel\n#include \"engine/status.h\"\n");
  Write(root, "kernels/cpu/ok.cc",
        "#include \"kernels/backend.h\"\n#include \"base/status.h\"\n#include <vector>\n"
        "#include \"scheduler.h\"\n");  // no kernels/cpu/scheduler.h: not one of our paths
  Write(root, "kernels/spaces.cc", "  #  include \"engine/scheduler.h\"\n");
  Write(root, "models/runner.cc",
        "#include \"engine/model_executor.h\"\n#include \"engine/scheduler.h\"\n"
        "#include \"kernels/backend.h\"\n#include \"metrics/x.h\"\n");
  Write(root, "metrics/obs.cc", "#include \"engine/events.h\"\n#include \"engine/request.h\"\n");
  Write(root, "server/y.cc", "#include \"models/model_runner.h\"\n#include \"kernels/device.h\"\n");
  Write(root, "structured/bad.cc", "#include \"engine/request.h\"\n#include \"base/utf8.h\"\n");
  Write(root, "engine/uses_grammar.cc", "#include \"structured/grammar.h\"\n");
  Write(root, "server/uses_grammar.cc", "#include \"structured/grammar.h\"\n");
  Write(root, "base/z.h", "#include \"base/status.h\"\n#include \"engine/events.h\"\n");
  Write(root, "app/main.cc", "#include \"kernels/device.h\"\n#include \"server/http_server.h\"\n");
  Write(root, "bench/serve/client.cc", "#include \"engine/engine_core.h\"\n");
  Write(root, "bench/decode_bench.cc", "#include \"kernels/backend.h\"\n");
  Write(root, "tests/t_test.cc", "#include \"engine/scheduler.h\"\n#include \"kernels/x.h\"\n");
  Write(root, "third_party/lib/l.h", "#include \"engine/scheduler.h\"\n");  // not walked

  int num_files = 0;
  std::vector<std::string> got;
  for (const Violation& v : CheckTree(root, &num_files)) got.push_back(v.ToString());
  const std::vector<std::string> want = {
      "base/z.h:2: includes \"engine/events.h\": base may include only its own headers (DESIGN "
      "§1), not engine",
      "bench/serve/client.cc:1: includes \"engine/engine_core.h\": bench/serve may include only "
      "base and itself (DESIGN §1), not engine",
      "engine/x.cc:1: includes \"kernels/backend.h\": engine may include only base, structured "
      "and itself (DESIGN §1), not kernels",
      "engine/x.cc:2: includes \"../kernels/backend.h\": climbs out of its folder; include by the "
      "path from the repository root",
      "kernels/bad.cc:2: includes \"engine/status.h\": kernels may include only base and itself "
      "(DESIGN §1), not engine",
      "kernels/spaces.cc:1: includes \"engine/scheduler.h\": kernels may include only base and "
      "itself (DESIGN §1), not engine",
      "metrics/obs.cc:2: includes \"engine/request.h\": metrics may include of engine/ only its "
      "observer interface (engine/engine_observer.h, engine/events.h, engine/scheduler_stats.h)",
      "models/runner.cc:2: includes \"engine/scheduler.h\": models may include of engine/ only its "
      "executor interface (engine/model_executor.h, engine/scheduled_batch.h, "
      "engine/sampling_params.h)",
      "models/runner.cc:4: includes \"metrics/x.h\": models may include only kernels, base and "
      "itself (DESIGN §1), not metrics",
      "server/y.cc:2: includes \"kernels/device.h\": server may include only engine, metrics, "
      "models, structured, base and itself (DESIGN §1), not kernels",
      "structured/bad.cc:1: includes \"engine/request.h\": structured may include only base and "
      "itself (DESIGN §1), not engine",
  };
  EXPECT_EQ(got, want);
  EXPECT_EQ(num_files, 17);
  fs::remove_all(root);
}

}  // namespace
}  // namespace tinyserve::arrows
