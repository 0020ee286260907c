// Whole model directories and files through ResolveAndLoadModel, as `serve` and `generate` load
// them: stories260K converted to HF and to GGUF gives run.c's tokens with its own tokenizer; a
// generated smollm-135m directory loads, answers a request through the engine, and its
// safetensors header survives a write/read round trip.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/convert.h"
#include "models/hf_presets.h"
#include "models/model_loader.h"
#include "models/safetensors.h"
#include "tests/models/test_util.h"

namespace tinyserve {
namespace {

using testing_util::ExpectGoldenGreedy;
using testing_util::ReadFile;
using testing_util::ScratchDir;

const std::string kModelDirModels = std::string(TINYSERVE_SHARED_DIR) + "/models";

void ExpectGoldenPrompts(const Tokenizer& tok, bool add_bos) {
  std::ifstream in(std::string(TINYSERVE_SHARED_DIR) + "/golden/stories260K_greedy.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  for (const auto& c : g["cases"]) {
    EXPECT_EQ(tok.Encode(c["prompt"].get<std::string>(), add_bos),
              c["prompt_token_ids"].get<std::vector<int32_t>>())
        << c["prompt"];
  }
}

TEST(ModelDirTest, Stories260KConvertedToHfServesRunCTokens) {
  ScratchDir dir("convert_hf");
  ASSERT_TRUE(ConvertLlama2cToHf(kModelDirModels + "/stories260K.bin",
                                 kModelDirModels + "/tok512.bin", TensorDtype::kF32, dir.path())
                  .ok());
  auto m = ResolveAndLoadModel({dir.path(), ""}, "");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->format, ModelFormat::kHfDirectory);
  EXPECT_EQ(m->tokenizer_path, dir / "tokenizer.json");
  EXPECT_TRUE(m->add_bos);
  EXPECT_EQ(m->chat_template, "");
  EXPECT_EQ(m->weights->config.bos_token_id, 1);
  // config.json's eos (BOS, where run.c stops) first, then tokenizer_config.json's </s>.
  EXPECT_EQ(m->weights->config.stop_token_ids, (std::vector<int32_t>{1, 2}));
  ExpectGoldenPrompts(*m->tokenizer, m->add_bos);
  ExpectGoldenGreedy(m->weights);
  auto with_tok = ResolveAndLoadModel({dir.path(), kModelDirModels + "/tok512.bin"}, "");
  ASSERT_FALSE(with_tok.ok());
  EXPECT_NE(with_tok.status().message().find("--tokenizer is only for llama2.c checkpoints"),
            std::string::npos);
}

TEST(ModelDirTest, Stories260KConvertedToGgufServesRunCTokens) {
  ScratchDir dir("convert_gguf");
  const std::string path = dir / "stories260K.gguf";
  ASSERT_TRUE(ConvertLlama2cToGguf(kModelDirModels + "/stories260K.bin",
                                   kModelDirModels + "/tok512.bin", TensorDtype::kF32, path)
                  .ok());
  auto m = ResolveAndLoadModel({path, ""}, "");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->format, ModelFormat::kGguf);
  EXPECT_TRUE(m->add_bos);
  ExpectGoldenPrompts(*m->tokenizer, m->add_bos);
  ExpectGoldenGreedy(m->weights);
}

TEST(ModelDirTest, NotAModelDirectoryIsNotFound) {
  ScratchDir dir("empty_dir");
  auto m = ResolveAndLoadModel({dir.path(), ""}, "");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("not a Hugging Face model directory (no config.json)"),
            std::string::npos);
}

TEST(ModelDirTest, PresetsHaveThePublishedShapes) {
  const auto smol = FindHfPreset("smollm-135m");
  ASSERT_TRUE(smol.has_value());
  EXPECT_EQ(smol->config.num_parameters(), 134515008);  // SmolLM-135M's published count
  const auto llama = FindHfPreset("llama-3.2-1b");
  ASSERT_TRUE(llama.has_value());
  EXPECT_EQ(llama->config.num_parameters(), 1235814400);  // Llama-3.2-1B, tied embeddings
  const auto qwen = FindHfPreset("qwen2.5-0.5b");
  ASSERT_TRUE(qwen.has_value());
  // Qwen2.5-0.5B: 494,032,768 with the q/k/v biases, which num_parameters() leaves out.
  EXPECT_EQ(qwen->config.num_parameters() + 24 * (896 + 2 * 128), 494032768);
  const auto tiny = FindHfPreset("tinyllama-1.1b");
  ASSERT_TRUE(tiny.has_value());
  EXPECT_EQ(tiny->config.num_parameters(), 1100048384);
  EXPECT_FALSE(FindHfPreset("gpt2").has_value());
}

// A directory whose chat template is not recognised still loads (serve's --chat-template may
// override it); the reason, naming the file, is kept for serve to report without the flag.
TEST(ModelDirTest, UnrecognisedChatTemplateLoadsWithItsReason) {
  ScratchDir dir("convert_hf_mistral_template");
  ASSERT_TRUE(ConvertLlama2cToHf(kModelDirModels + "/stories260K.bin",
                                 kModelDirModels + "/tok512.bin", TensorDtype::kF32, dir.path())
                  .ok());
  const std::string config_path = dir / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::parse(ReadFile(config_path));
  config["chat_template"] =
      "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} "
      "[/INST]{% endfor %}";  // Mistral style: not one of the families
  std::ofstream(config_path) << config.dump();
  auto m = ResolveAndLoadModel({dir.path(), ""}, "");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->chat_template, "");
  EXPECT_NE(m->chat_template_error.find(config_path + ": unrecognised chat_template"),
            std::string::npos)
      << m->chat_template_error;
  ExpectGoldenPrompts(*m->tokenizer, m->add_bos);
}

TEST(ModelDirTest, GeneratedSmolLMLoadsAndAnswersARequest) {
  ScratchDir dir("gen_smollm");
  ASSERT_TRUE(
      WriteRandomHfModel(*FindHfPreset("smollm-135m"), TensorDtype::kBF16, 7, dir.path()).ok());
  auto m = ResolveAndLoadModel({dir.path(), ""}, "");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->weights->config;
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(m->tokenizer->vocab_size(), 49152);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(m->chat_template, "chatml");
  EXPECT_FALSE(m->add_bos);
  EXPECT_EQ(c.stop_token_ids.front(), 0);

  // The safetensors header round trip: the same tensors written again give the same header bytes.
  auto f = SafetensorsFile::Open(dir / "model.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->tensors().size(), 2u + 9u * 30u);
  std::vector<SafetensorsWriteTensor> again;
  for (const SafetensorsTensor& t : f->tensors()) {
    again.push_back(
        {t.name, t.shape, [](int64_t, int64_t n, float* out) { std::fill(out, out + n, 0.0f); }});
  }
  ASSERT_TRUE(
      WriteSafetensors(dir / "again.safetensors", again, TensorDtype::kBF16, f->metadata()).ok());
  auto g = SafetensorsFile::Open(dir / "again.safetensors");
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->header_bytes(), f->header_bytes());
  EXPECT_EQ(ReadFile(dir / "again.safetensors").substr(0, 8 + g->header_bytes()),
            ReadFile(dir / "model.safetensors").substr(0, 8 + f->header_bytes()));

  // One greedy request through the model runner (as the engine runs it), 5 new tokens.
  ModelRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 8;
  auto runner = ModelRunner::Create(m->weights, CreateCpuBackend(2), o);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  const std::vector<int32_t> prompt = m->tokenizer->Encode("Hello, world", m->add_bos);
  ASSERT_FALSE(prompt.empty());
  auto out = GenerateStaticBatch(**runner, {prompt}, {5}, StaticBatchOptions{});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ((*out)[0].output_ids.size(), 5u);
  for (int32_t id : (*out)[0].output_ids) EXPECT_LT(id, 49152);
  // Deterministic: the same request again gives the same tokens.
  auto again_out = GenerateStaticBatch(**runner, {prompt}, {5}, StaticBatchOptions{});
  ASSERT_TRUE(again_out.ok());
  EXPECT_EQ((*again_out)[0].output_ids, (*out)[0].output_ids);
}

}  // namespace
}  // namespace tinyserve
