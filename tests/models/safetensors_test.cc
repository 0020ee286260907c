// safetensors: dtype conversions, write/read round trips, corrupt files, and HF checkpoints that
// do not match their config.json (each problem named), sharded checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "models/hf_model.h"
#include "models/safetensors.h"
#include "tests/models/test_util.h"

namespace tinyserve {
namespace {

using testing_util::ReadFile;
using testing_util::ScratchDir;
using testing_util::WriteFile;

// An empty tensor reads into an empty vector: null pointers, no copy (UBSan: memcpy's arguments
// are nonnull even for 0 bytes; the safetensors_file fuzz target found it). This can only fail
// under the sanitizers (scripts/sanitize.sh), as the regression input's replay does.
TEST(TensorDtypeTest, ZeroCountAcceptsNullPointers) {
  for (TensorDtype dtype : {TensorDtype::kF32, TensorDtype::kBF16, TensorDtype::kF16}) {
    ConvertToF32(dtype, nullptr, 0, nullptr);
    ConvertFromF32(dtype, nullptr, 0, nullptr);
  }
}

TEST(TensorDtypeTest, ConversionsRoundToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBf16(0.1f), 0x3dcd);         // 0x3dcccccd rounds up
  EXPECT_EQ(F32ToBf16(1.00390625f), 0x3f80);  // exactly half way, to even (down)
  EXPECT_EQ(F32ToBf16(1.01171875f), 0x3f82);  // half way, to even (up)
  EXPECT_EQ(Bf16ToF32(0xc040), -3.0f);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.5f), 0xc100);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);                 // rounds past the largest: infinity
  EXPECT_EQ(F32ToF16(1.0f + 1.0f / 2048), 0x3c00);       // half way, to even
  EXPECT_EQ(F32ToF16(5.9604644775390625e-8f), 0x0001);   // smallest subnormal
  EXPECT_EQ(F32ToF16(2.98023223876953125e-8f), 0x0000);  // half of it: ties to even (zero)
  EXPECT_EQ(F16ToF32(0x0001), 5.9604644775390625e-8f);
  EXPECT_EQ(F16ToF32(0x3555), 0.333251953125f);
  EXPECT_EQ(F16ToF32(0xfc00), -INFINITY);
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite f16 survives f16 -> f32 -> f16
    ASSERT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h);
  }
}

class SafetensorsDtypeTest : public ::testing::TestWithParam<TensorDtype> {};

TEST_P(SafetensorsDtypeTest, WriteThenReadGivesTheSameHeaderAndValues) {
  ScratchDir dir("st_roundtrip");
  const std::vector<float> a = {1.0f, -2.5f, 0.375f, 1024.0f, -0.0f, 3.0f};  // exact in 16 bits
  const std::vector<float> b = {0.5f, 0.25f};
  const std::string path = dir / "x.safetensors";
  ASSERT_TRUE(WriteSafetensors(path,
                               {TensorFromFloats("a.weight", {2, 3}, a.data()),
                                TensorFromFloats("b", {2}, b.data())},
                               GetParam(), {{"format", "pt"}})
                  .ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->header_bytes() % 8, 0u);
  EXPECT_EQ(f->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(f->tensors().size(), 2u);
  const SafetensorsTensor* t = f->Find("a.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, GetParam());
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->data_begin, 8 + f->header_bytes());
  std::vector<float> got(6);
  f->ReadF32(*t, got.data());
  EXPECT_EQ(got, a);
  EXPECT_EQ(f->Find("b")->data_begin, t->data_begin + t->num_bytes);
  EXPECT_EQ(f->Find("missing"), nullptr);
  // The header itself is what the reference writer produces: data_offsets relative to the data.
  const std::string bytes = ReadFile(path);
  const auto header = nlohmann::json::parse(bytes.substr(8, f->header_bytes()));
  EXPECT_EQ(header["b"]["data_offsets"][0].get<uint64_t>(), t->num_bytes);
  EXPECT_EQ(header["a.weight"]["dtype"], TensorDtypeName(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SafetensorsDtypeTest,
                         ::testing::Values(TensorDtype::kF32, TensorDtype::kF16,
                                           TensorDtype::kBF16),
                         [](const auto& test_info) { return TensorDtypeName(test_info.param); });

// A file from a header JSON and `data_bytes` zero bytes of data.
std::string MakeFile(const std::string& header, size_t data_bytes, uint64_t claimed_len = 0) {
  const uint64_t n = claimed_len != 0 ? claimed_len : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + std::string(data_bytes, '\0');
}

std::string ParseError(const std::string& bytes) {
  auto f = SafetensorsFile::Parse(MappedFile::FromBytes("bad.safetensors", bytes));
  EXPECT_FALSE(f.ok());
  return f.ok() ? "" : f.status().message();
}

TEST(SafetensorsTest, CorruptFilesGiveTheRightError) {
  const std::string good = R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})";
  ASSERT_TRUE(SafetensorsFile::Parse(MappedFile::FromBytes("ok", MakeFile(good, 16))).ok());
  EXPECT_EQ(ParseError("abc"),
            "bad.safetensors: not a valid safetensors file: file is 3 bytes, "
            "shorter than the 8-byte header length");
  EXPECT_EQ(ParseError(MakeFile(good, 16, 1000)),
            "bad.safetensors: not a valid safetensors file: header length 1000 runs past the end "
            "of the " +
                std::to_string(8 + good.size() + 16) + "-byte file");
  EXPECT_EQ(ParseError(MakeFile("{not json}", 0)),
            "bad.safetensors: not a valid safetensors file: header is not a JSON object");
  EXPECT_EQ(ParseError(MakeFile(good, 8)),
            "bad.safetensors: not a valid safetensors file: tensor w: data_offsets [0, 16] run "
            "past the end of the data (8 bytes)");
  EXPECT_EQ(
      ParseError(MakeFile(R"({"w": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16)),
      "bad.safetensors: not a valid safetensors file: tensor w: dtype I64 is not supported (F32, "
      "F16 and BF16 are)");
  EXPECT_EQ(ParseError(MakeFile(
                R"({"w": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 16]}})", 16)),
            "bad.safetensors: not a valid safetensors file: tensor w: data_offsets [0, 16] hold 16 "
            "bytes, but shape [2, 2] of F16 needs 8");
  EXPECT_EQ(ParseError(MakeFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                16)),
            "bad.safetensors: not a valid safetensors file: tensors a and b overlap");
  EXPECT_NE(
      ParseError(MakeFile(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8))
          .find("tensor w: shape [-2] is not a list of sizes"),
      std::string::npos);
  EXPECT_NE(ParseError(MakeFile(R"({"w": {"dtype": "F32", "shape": [2]}})", 8))
                .find("tensor w: \"data_offsets\" is not [begin, end]"),
            std::string::npos);
}

// A tiny HF checkpoint written from random weights, for the mismatch tests.
class HfCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    weights_ = testing_util::RandomWeights(testing_util::TinyConfig(), 5);
    ASSERT_TRUE(WriteHfModel(*weights_, "LlamaForCausalLM", TensorDtype::kF32, dir_.path()).ok());
  }
  // Rewrites model.safetensors with `edit` applied to the tensor list of the original.
  void Rewrite(const std::function<void(std::vector<SafetensorsWriteTensor>&)>& edit) {
    auto f = SafetensorsFile::Open(dir_ / "model.safetensors");
    ASSERT_TRUE(f.ok());
    values_.clear();
    values_.reserve(f->tensors().size());
    std::vector<SafetensorsWriteTensor> tensors;
    for (const SafetensorsTensor& t : f->tensors()) {
      values_.emplace_back(t.num_elements());
      f->ReadF32(t, values_.back().data());
      tensors.push_back(TensorFromFloats(t.name, t.shape, values_.back().data()));
    }
    edit(tensors);
    ASSERT_TRUE(WriteSafetensors(dir_ / "model.safetensors", tensors, TensorDtype::kF32).ok());
  }
  std::string LoadError() {
    auto w = LoadHfModel(dir_.path());
    EXPECT_FALSE(w.ok());
    return w.ok() ? "" : w.status().message();
  }

  ScratchDir dir_{"hf_ckpt"};
  std::shared_ptr<LlamaWeights> weights_;
  std::vector<std::vector<float>> values_;
};

TEST_F(HfCheckpointTest, LoadsBackExactly) {
  auto w = LoadHfModel(dir_.path());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->token_embedding, weights_->token_embedding);
  EXPECT_EQ((*w)->classifier, weights_->classifier);
  EXPECT_EQ((*w)->layers[1].wqkv, weights_->layers[1].wqkv);  // already half split: kept
  EXPECT_EQ((*w)->layers[1].w2, weights_->layers[1].w2);
  EXPECT_EQ((*w)->config.name, std::filesystem::path(dir_.path()).filename().string());
}

TEST_F(HfCheckpointTest, MissingExtraAndMisShapedTensorsAreAllNamed) {
  Rewrite([](std::vector<SafetensorsWriteTensor>& t) {
    for (auto it = t.begin(); it != t.end();) {
      if (it->name == "model.layers.1.mlp.up_proj.weight" || it->name == "lm_head.weight") {
        it = t.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& x : t) {
      if (x.name == "model.norm.weight") x.shape = {4, 4};
    }
    const auto extra = t.front();
    t.push_back(TensorFromFloats("model.layers.2.mlp.up_proj.weight", {4}, nullptr));
    t.back().fill = extra.fill;
  });
  const std::string e = LoadError();
  EXPECT_NE(e.find("the checkpoint does not match config.json (LlamaForCausalLM, 2 layers)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("missing model.layers.1.mlp.up_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("missing lm_head.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("model.norm.weight has shape [4, 4], config.json implies [16]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("extra model.layers.2.mlp.up_proj.weight"), std::string::npos) << e;
}

TEST_F(HfCheckpointTest, QkvBiasIsRequiredWhenTheConfigSaysSo) {
  std::string cfg = ReadFile(dir_ / "config.json");
  cfg.replace(cfg.find("\"attention_bias\": false"), 23, "\"attention_bias\": true");
  WriteFile(dir_ / "config.json", cfg);
  const std::string e = LoadError();
  EXPECT_NE(e.find("missing model.layers.0.self_attn.q_proj.bias"), std::string::npos) << e;
  EXPECT_NE(e.find("missing model.layers.1.self_attn.v_proj.bias"), std::string::npos) << e;
}

TEST_F(HfCheckpointTest, NoWeightsFileIsNotFound) {
  std::filesystem::remove(dir_ / "model.safetensors");
  auto w = LoadHfModel(dir_.path());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_NE(w.status().message().find("no model.safetensors or model.safetensors.index.json"),
            std::string::npos);
}

// Splits model.safetensors into two shards with an index, as save_pretrained does.
void Shard(const ScratchDir& dir) {
  auto f = SafetensorsFile::Open(dir / "model.safetensors");
  ASSERT_TRUE(f.ok());
  std::vector<std::vector<float>> values;
  values.reserve(f->tensors().size());
  std::vector<SafetensorsWriteTensor> parts[2];
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const SafetensorsTensor& t = f->tensors()[i];
    values.emplace_back(t.num_elements());
    f->ReadF32(t, values.back().data());
    const int shard = i < f->tensors().size() / 2 ? 0 : 1;
    parts[shard].push_back(TensorFromFloats(t.name, t.shape, values.back().data()));
    index["weight_map"][t.name] =
        "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
  }
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(
        WriteSafetensors(dir / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"),
                         parts[s], TensorDtype::kBF16)
            .ok());
  }
  WriteFile(dir / "model.safetensors.index.json", index.dump());
  std::filesystem::remove(dir / "model.safetensors");
}

TEST_F(HfCheckpointTest, ShardedCheckpointLoadsAndAMissingShardIsNamed) {
  Shard(dir_);
  auto w = LoadHfModel(dir_.path());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->final_norm[3], Bf16ToF32(F32ToBf16(weights_->final_norm[3])));
  std::filesystem::remove(dir_ / "model-00002-of-00002.safetensors");
  auto missing = LoadHfModel(dir_.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(
                "model-00002-of-00002.safetensors: shard missing (model.safetensors.index.json "
                "puts "),
            std::string::npos)
      << missing.status().message();
}

TEST_F(HfCheckpointTest, IndexThatPointsAtTheWrongShardIsAnError) {
  Shard(dir_);
  std::string index = ReadFile(dir_ / "model.safetensors.index.json");
  const std::string from = "\"model.norm.weight\":\"model-00002-of-00002";
  ASSERT_NE(index.find(from), std::string::npos) << index;
  index.replace(index.find(from), from.size(), "\"model.norm.weight\":\"model-00001-of-00002");
  WriteFile(dir_ / "model.safetensors.index.json", index);
  const std::string e = LoadError();
  EXPECT_NE(e.find("puts tensor model.norm.weight in this shard, but the shard does not hold it"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace tinyserve
