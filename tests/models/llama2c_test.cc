// llama2.c checkpoint loader: the real model loads with the right shapes; every kind of bad file
// gets an error that names the file and the problem.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "models/llama2c.h"
#include "models/model_loader.h"

namespace tinyserve {
namespace {

const std::string kLlama2cShared = TINYSERVE_SHARED_DIR;

class Llama2cTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tinyserve_llama2c_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a header followed by `floats` zero floats.
  std::string WriteFile(const std::string& name, const Llama2cHeader& h, int64_t floats) {
    const std::string p = Path(name);
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&h), sizeof(h));
    std::vector<float> zeros(static_cast<size_t>(floats), 0.0f);
    out.write(reinterpret_cast<const char*>(zeros.data()), floats * 4);
    return p;
  }

  std::filesystem::path dir_;
};

constexpr Llama2cHeader kSmall{16, 40, 2, 4, 2, 32, 24};

int64_t FloatsFor(const Llama2cHeader& h) { return (*Llama2cExpectedFileSize(h, "x") - 28) / 4; }

TEST_F(Llama2cTest, LoadsStories260K) {
  auto w = LoadLlama2cCheckpoint(kLlama2cShared + "/models/stories260K.bin");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const ModelConfig& c = (*w)->config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.num_parameters(), 260032);  // models/README.md: 264,128 floats less 4,096 freq_cis
  EXPECT_EQ(c.stop_token_ids, std::vector<int32_t>{1});
  EXPECT_EQ(c.name, "stories260K");
  EXPECT_EQ(*Llama2cExpectedFileSize({64, 172, 5, 8, 4, 512, 512}, "x"), 1056540);
}

TEST_F(Llama2cTest, UnsharedClassifierIsReadFromTheEnd) {
  Llama2cHeader h = kSmall;
  h.vocab_size = -32;
  const std::string p = Path("unshared.bin");
  ASSERT_TRUE(WriteRandomLlama2cCheckpoint(p, h, 7).ok());
  auto w = LoadLlama2cCheckpoint(p);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_FALSE((*w)->config.shared_classifier);
  EXPECT_EQ((*w)->config.vocab_size, 32);
  ASSERT_EQ((*w)->classifier.size(), 32u * 16u);
  EXPECT_NE((*w)->lm_head(), (*w)->token_embedding.data());
  EXPECT_NE((*w)->classifier, (*w)->token_embedding);
}

TEST_F(Llama2cTest, RandomCheckpointsAreDeterministicInTheSeed) {
  const std::string a = Path("a.bin"), b = Path("b.bin"), c = Path("c.bin");
  ASSERT_TRUE(WriteRandomLlama2cCheckpoint(a, kSmall, 42).ok());
  ASSERT_TRUE(WriteRandomLlama2cCheckpoint(b, kSmall, 42).ok());
  ASSERT_TRUE(WriteRandomLlama2cCheckpoint(c, kSmall, 43).ok());
  auto wa = LoadLlama2cCheckpoint(a), wb = LoadLlama2cCheckpoint(b), wc = LoadLlama2cCheckpoint(c);
  ASSERT_TRUE(wa.ok() && wb.ok() && wc.ok());
  EXPECT_EQ((*wa)->layers[1].wqkv, (*wb)->layers[1].wqkv);
  EXPECT_NE((*wa)->layers[1].wqkv, (*wc)->layers[1].wqkv);
  EXPECT_EQ((*wa)->layers[0].attn_norm, std::vector<float>(16, 1.0f));
}

void ExpectError(const StatusOr<std::shared_ptr<const LlamaWeights>>& r, const std::string& path,
                 const std::string& what) {
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
}

TEST_F(Llama2cTest, MissingFile) {
  const std::string p = Path("nope.bin");
  ExpectError(LoadLlama2cCheckpoint(p), p, "not found");
}

TEST_F(Llama2cTest, ShorterThanTheHeader) {
  const std::string p = Path("short.bin");
  std::ofstream(p, std::ios::binary) << "abc";
  ExpectError(LoadLlama2cCheckpoint(p), p, "shorter than the 28-byte header");
}

TEST_F(Llama2cTest, TruncatedFile) {
  const std::string p = WriteFile("trunc.bin", kSmall, FloatsFor(kSmall) - 1);
  ExpectError(LoadLlama2cCheckpoint(p), p, "truncated");
}

TEST_F(Llama2cTest, OversizedFile) {
  const std::string p = WriteFile("big.bin", kSmall, FloatsFor(kSmall) + 3);
  ExpectError(LoadLlama2cCheckpoint(p), p, "oversized");
}

TEST_F(Llama2cTest, ZeroOrNegativeDimensions) {
  for (int field = 0; field < 7; ++field) {
    for (int32_t bad : {0, -3}) {
      Llama2cHeader h = kSmall;
      int32_t* f = &h.dim + field;
      if (field == 5 && bad < 0) continue;  // negative vocab_size means "unshared classifier"
      *f = bad;
      const std::string p = WriteFile("dim" + std::to_string(field) + ".bin", h, 100);
      auto r = LoadLlama2cCheckpoint(p);
      ASSERT_FALSE(r.ok()) << "field " << field;
      EXPECT_NE(r.status().message().find(p), std::string::npos);
      EXPECT_NE(r.status().message().find(std::to_string(bad)), std::string::npos)
          << r.status().message();
    }
  }
}

TEST_F(Llama2cTest, HeadsNotDividingDim) {
  Llama2cHeader h = kSmall;
  h.n_heads = 5;
  h.n_kv_heads = 5;
  ExpectError(LoadLlama2cCheckpoint(WriteFile("heads.bin", h, 100)), Path("heads.bin"),
              "n_heads = 5 does not divide dim = 16");
  h = kSmall;
  h.n_kv_heads = 3;
  ExpectError(LoadLlama2cCheckpoint(WriteFile("kv.bin", h, 100)), Path("kv.bin"),
              "n_kv_heads = 3 does not divide n_heads = 4");
}

TEST_F(Llama2cTest, AbsurdSizesAreRejectedWithoutAllocating) {
  // Petabytes implied, 40 bytes present: compared, not allocated.
  Llama2cHeader h{1 << 16, 1 << 16, 1 << 10, 1 << 8, 1 << 8, 1 << 16, 1 << 16};
  const std::string p = WriteFile("huge.bin", h, 10);
  ExpectError(LoadLlama2cCheckpoint(p), p, "truncated");
  h = {1 << 20, 1 << 20, 1 << 20, 1 << 10, 1 << 10, 1 << 20, 1 << 20};
  ExpectError(LoadLlama2cCheckpoint(WriteFile("overflow.bin", h, 10)), Path("overflow.bin"),
              "sizes overflow");
  h.dim = 0x7fffffff;
  ExpectError(LoadLlama2cCheckpoint(WriteFile("huge2.bin", h, 10)), Path("huge2.bin"),
              "implausibly large");
}

TEST_F(Llama2cTest, MissingTokenizerIsAClearError) {
  const std::string p = Path("model.bin");
  ASSERT_TRUE(WriteRandomLlama2cCheckpoint(p, kSmall, 1).ok());
  auto r = ResolveAndLoadModel({p, ""}, kLlama2cShared);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no tokenizer found"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("tok32.bin"), std::string::npos);
  EXPECT_NE(r.status().message().find("--tokenizer"), std::string::npos);

  auto r2 = ResolveAndLoadModel({p, Path("missing_tok.bin")}, kLlama2cShared);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("missing_tok.bin"), std::string::npos)
      << r2.status().message();
}

TEST_F(Llama2cTest, DefaultModelAndTokenizerResolve) {
  auto r = ResolveAndLoadModel({"", ""}, kLlama2cShared);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->model_path.find("stories260K.bin"), std::string::npos);
  EXPECT_NE(r->tokenizer_path.find("tok512.bin"), std::string::npos);
  EXPECT_EQ(r->tokenizer->vocab_size(), 512);
}

}  // namespace
}  // namespace tinyserve
