// GgufFile: every metadata type, tensor infos and alignment, and clear errors on broken files.
#include "models/tokenizer/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "tests/tokenizer/gguf_writer.h"
#include "tests/tokenizer/test_data.h"

namespace tinyserve {
namespace {

using ::testing::HasSubstr;
using tinyserve::testing::GgufWriter;
using tinyserve::testing::ReadFileBytes;
using tinyserve::testing::SharedPath;
using tinyserve::testing::TempFile;

StatusOr<GgufFile> Parse(const std::string& bytes) {
  return GgufFile::Parse(MappedFile::FromBytes("model.gguf", bytes));
}

std::string ParseError(const std::string& bytes) {
  StatusOr<GgufFile> gguf = Parse(bytes);
  EXPECT_FALSE(gguf.ok());
  if (gguf.ok()) return "";
  EXPECT_EQ(gguf.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(gguf.status().message(), HasSubstr("model.gguf"));
  return gguf.status().message();
}

TEST(GgufTest, ReadsTheLlamaSpmVocabFile) {
  StatusOr<GgufFile> gguf =
      GgufFile::Open(SharedPath("models/llamacpp_vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  EXPECT_EQ(gguf->version(), 3u);
  EXPECT_TRUE(gguf->tensors().empty());
  EXPECT_EQ(*gguf->GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(gguf->GetStringArray("tokenizer.ggml.tokens")->size(), 32000u);
  EXPECT_EQ(gguf->GetStringArray("tokenizer.ggml.tokens")->at(29871), "\xE2\x96\x81");
  EXPECT_EQ(gguf->GetFloatArray("tokenizer.ggml.scores")->size(), 32000u);
  EXPECT_EQ(gguf->GetIntArray("tokenizer.ggml.token_type")->at(1), 3);  // BOS is control
  EXPECT_EQ(*gguf->GetUint("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(*gguf->GetUint("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(*gguf->GetBool("tokenizer.ggml.add_bos_token"), true);
}

TEST(GgufTest, ReadsTheGpt2VocabFile) {
  StatusOr<GgufFile> gguf =
      GgufFile::Open(SharedPath("models/llamacpp_vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  EXPECT_EQ(*gguf->GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(gguf->GetStringArray("tokenizer.ggml.tokens")->size(), 50257u);
  EXPECT_EQ(gguf->GetStringArray("tokenizer.ggml.merges")->size(), 50000u);
  EXPECT_EQ(gguf->GetStringArray("tokenizer.ggml.merges")->at(0), "\xC4\xA0 t");  // "Ġ t"
  EXPECT_EQ(*gguf->GetUint("tokenizer.ggml.bos_token_id"), 50256u);
}

// A file with one value of every type, nested arrays, alignment 64 and two tensors.
std::string AllTypesFile(uint32_t version = 3) {
  GgufWriter w;
  w.Header(/*n_tensors=*/2, /*n_kv=*/19, version);
  w.Key("u8", GgufType::kUint8).Raw<uint8_t>(200);
  w.Key("i8", GgufType::kInt8).Raw<int8_t>(-100);
  w.Key("u16", GgufType::kUint16).Raw<uint16_t>(60000);
  w.Key("i16", GgufType::kInt16).Raw<int16_t>(-30000);
  w.Key("u32", GgufType::kUint32).Raw<uint32_t>(4000000000u);
  w.Key("i32", GgufType::kInt32).Raw<int32_t>(-2000000000);
  w.Key("u64", GgufType::kUint64).Raw<uint64_t>(18000000000000000000ull);
  w.Key("i64", GgufType::kInt64).Raw<int64_t>(-9000000000000000000ll);
  w.Key("f32", GgufType::kFloat32).Raw<float>(1.5f);
  w.Key("f64", GgufType::kFloat64).Raw<double>(-2.25);
  w.Key("bool", GgufType::kBool).Raw<uint8_t>(1);
  w.KeyString("string", "héllo");
  w.KeyStringArray("strings", {"a", "", "ccc"});
  w.KeyF32Array("floats", {0.5f, -1.0f});
  w.KeyI32Array("ints", {-1, 7});
  w.Key("u8s", GgufType::kArray).Type(GgufType::kUint8).Raw<uint64_t>(3);
  w.Raw<uint8_t>(1).Raw<uint8_t>(2).Raw<uint8_t>(255);
  w.Key("bools", GgufType::kArray)
      .Type(GgufType::kBool)
      .Raw<uint64_t>(2)
      .Raw<uint8_t>(0)
      .Raw<uint8_t>(1);
  // [[1, 2], []] as an array of arrays of u16.
  w.Key("nested", GgufType::kArray).Type(GgufType::kArray).Raw<uint64_t>(2);
  w.Type(GgufType::kUint16).Raw<uint64_t>(2).Raw<uint16_t>(1).Raw<uint16_t>(2);
  w.Type(GgufType::kUint16).Raw<uint64_t>(0);
  w.Key("general.alignment", GgufType::kUint32).Raw<uint32_t>(64);
  w.Tensor("weight", {3, 2}, /*f32*/ 0, 0);
  w.Tensor("bias", {3}, /*f16*/ 1, 64);
  w.PadTo(64);
  std::string data(64 + 6, '\0');
  for (int i = 0; i < 6; ++i) {
    const float f = static_cast<float>(i);
    std::memcpy(data.data() + 4 * i, &f, 4);
  }
  w.Bytes(data);
  return w.bytes();
}

TEST(GgufTest, ReadsEveryValueTypeAndTensorInfos) {
  for (uint32_t version : {2u, 3u}) {
    StatusOr<GgufFile> gguf = Parse(AllTypesFile(version));
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    const GgufFile& g = *gguf;
    EXPECT_EQ(g.version(), version);
    EXPECT_EQ(g.keys().size(), 19u);
    EXPECT_EQ(g.keys().front(), "u8");
    EXPECT_EQ(*g.GetUint("u8"), 200u);
    EXPECT_EQ(*g.GetInt("i8"), -100);
    EXPECT_EQ(*g.GetUint("u16"), 60000u);
    EXPECT_EQ(*g.GetInt("i16"), -30000);
    EXPECT_EQ(*g.GetUint("u32"), 4000000000u);
    EXPECT_EQ(*g.GetInt("i32"), -2000000000);
    EXPECT_EQ(*g.GetUint("u64"), 18000000000000000000ull);
    EXPECT_EQ(*g.GetInt("i64"), -9000000000000000000ll);
    EXPECT_EQ(*g.GetFloat("f32"), 1.5);
    EXPECT_EQ(*g.GetFloat("f64"), -2.25);
    EXPECT_EQ(*g.GetFloat("i32"), -2e9);
    EXPECT_EQ(*g.GetBool("bool"), true);
    EXPECT_EQ(*g.GetString("string"), "héllo");
    EXPECT_EQ(*g.GetStringArray("strings"), std::vector<std::string>({"a", "", "ccc"}));
    EXPECT_EQ(*g.GetFloatArray("floats"), std::vector<double>({0.5, -1.0}));
    EXPECT_EQ(*g.GetIntArray("ints"), std::vector<int64_t>({-1, 7}));
    EXPECT_EQ(*g.GetIntArray("u8s"), std::vector<int64_t>({1, 2, 255}));
    ASSERT_NE(g.FindArray("bools"), nullptr);
    EXPECT_EQ(g.FindArray("bools")->uints, std::vector<uint64_t>({0, 1}));
    const GgufArray* nested = g.FindArray("nested");
    ASSERT_NE(nested, nullptr);
    EXPECT_EQ(nested->element_type, GgufType::kArray);
    ASSERT_EQ(nested->size(), 2u);
    EXPECT_EQ(nested->arrays[0].uints, std::vector<uint64_t>({1, 2}));
    EXPECT_EQ(nested->arrays[1].size(), 0u);

    EXPECT_EQ(g.alignment(), 64u);
    EXPECT_EQ(g.data_offset() % 64, 0u);
    ASSERT_EQ(g.tensors().size(), 2u);
    const GgufTensorInfo* weight = g.FindTensor("weight");
    ASSERT_NE(weight, nullptr);
    EXPECT_EQ(weight->dims, std::vector<uint64_t>({3, 2}));
    EXPECT_EQ(weight->num_elements, 6u);
    EXPECT_EQ(weight->num_bytes, 24u);
    EXPECT_STREQ(GgmlTypeName(weight->ggml_type), "f32");
    float last = 0;
    std::memcpy(&last, g.tensor_data(*weight) + 20, 4);
    EXPECT_EQ(last, 5.0f);
    EXPECT_EQ(g.FindTensor("bias")->num_bytes, 6u);
    EXPECT_EQ(g.FindTensor("bias")->offset, 64u);
    EXPECT_EQ(g.FindTensor("missing"), nullptr);
  }
}

TEST(GgufTest, GetterErrorsNameTheKeyAndTypes) {
  StatusOr<GgufFile> gguf = Parse(AllTypesFile());
  ASSERT_TRUE(gguf.ok());
  StatusOr<std::string> missing = gguf->GetString("no.such.key");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("GGUF key 'no.such.key' is missing"));
  EXPECT_THAT(gguf->GetUint("string").status().message(),
              HasSubstr("key 'string' is string, expected an integer"));
  EXPECT_THAT(gguf->GetString("u8").status().message(), HasSubstr("is u8, expected string"));
  EXPECT_THAT(gguf->GetUint("i8").status().message(), HasSubstr("expected a non-negative integer"));
  EXPECT_THAT(gguf->GetInt("u64").status().message(), HasSubstr("does not fit in int64"));
  EXPECT_THAT(gguf->GetStringArray("floats").status().message(),
              HasSubstr("is array of f32, expected array of string"));
  EXPECT_THAT(gguf->GetBool("u8").status().message(), HasSubstr("expected bool"));
}

TEST(GgufTest, OpenReadsTheSameAsParse) {
  TempFile file(AllTypesFile(), "model.gguf");
  StatusOr<GgufFile> gguf = GgufFile::Open(file.path());
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  EXPECT_EQ(gguf->path(), file.path());
  EXPECT_EQ(*gguf->GetString("string"), "héllo");
  GgufFile moved = std::move(gguf).value();  // the mapping moves with it
  float last = 0;
  std::memcpy(&last, moved.tensor_data(*moved.FindTensor("weight")) + 20, 4);
  EXPECT_EQ(last, 5.0f);
  StatusOr<GgufFile> empty = GgufFile::Open(TempFile("", "empty.gguf").path());
  EXPECT_THAT(empty.status().message(), HasSubstr("not a GGUF file"));
}

TEST(GgufTest, MissingFile) {
  StatusOr<GgufFile> gguf = GgufFile::Open("/nonexistent/model.gguf");
  EXPECT_EQ(gguf.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(gguf.status().message(), HasSubstr("/nonexistent/model.gguf: no such file"));
}

TEST(GgufTest, HeaderErrors) {
  EXPECT_THAT(ParseError(""), HasSubstr("not a GGUF file"));
  EXPECT_THAT(ParseError("GGML1234"), HasSubstr("not a GGUF file"));
  EXPECT_THAT(ParseError("GGUF"), HasSubstr("truncated: the version"));
  EXPECT_THAT(ParseError(GgufWriter().Header(0, 0, 1).bytes()),
              HasSubstr("version 1 is not supported"));
  EXPECT_THAT(ParseError(GgufWriter().Header(0, 0, 0x03000000).bytes()),
              HasSubstr("unsupported GGUF version 50331648"));
  EXPECT_THAT(ParseError(GgufWriter().Bytes("GGUF").Raw<uint32_t>(3).Raw<uint64_t>(0).bytes()),
              HasSubstr("truncated: the header"));
}

TEST(GgufTest, AbsurdCountsAndLengthsAreRejectedBeforeAllocating) {
  EXPECT_THAT(ParseError(GgufWriter().Header(0, 1ull << 60).bytes()),
              HasSubstr("n_kv 1152921504606846976 is impossible"));
  EXPECT_THAT(ParseError(GgufWriter().Header(~0ull, 0).bytes()), HasSubstr("n_tensors"));
  // A key whose length is 2^63.
  EXPECT_THAT(
      ParseError(GgufWriter().Header(0, 1).Raw<uint64_t>(1ull << 63).Bytes("0123456789").bytes()),
      HasSubstr("key #0 has length 9223372036854775808 but only 10 bytes are left"));
  // A string value longer than the file.
  EXPECT_THAT(ParseError(GgufWriter()
                             .Header(0, 1)
                             .Key("s", GgufType::kString)
                             .Raw<uint64_t>(1000)
                             .Bytes("short")
                             .bytes()),
              HasSubstr("key 's' has length 1000 but only 5 bytes are left"));
  // Arrays claiming 2^62 strings / bytes.
  EXPECT_THAT(ParseError(GgufWriter()
                             .Header(0, 1)
                             .Key("a", GgufType::kArray)
                             .Type(GgufType::kString)
                             .Raw<uint64_t>(1ull << 62)
                             .Bytes("xxxxxxxxxxxxxxxx")
                             .bytes()),
              HasSubstr("key 'a' claims 4611686018427387904 elements of type string"));
  EXPECT_THAT(ParseError(GgufWriter()
                             .Header(0, 1)
                             .Key("b", GgufType::kArray)
                             .Type(GgufType::kUint8)
                             .Raw<uint64_t>(~0ull)
                             .Bytes("xyzxyzxyzxyzxyz")
                             .bytes()),
              HasSubstr("elements of type u8 but only 15 bytes are left"));
  // A string element inside an array that is longer than the file.
  EXPECT_THAT(ParseError(GgufWriter()
                             .Header(0, 1)
                             .Key("c", GgufType::kArray)
                             .Type(GgufType::kString)
                             .Raw<uint64_t>(1)
                             .Raw<uint64_t>(1ull << 40)
                             .Bytes("abcdef")
                             .bytes()),
              HasSubstr("an element of key 'c' has length 1099511627776"));
}

TEST(GgufTest, MalformedValuesAreRejected) {
  EXPECT_THAT(
      ParseError(
          GgufWriter().Header(0, 1).Key("t", static_cast<GgufType>(13)).Raw<uint64_t>(0).bytes()),
      HasSubstr("key 't' has invalid type 13"));
  EXPECT_THAT(ParseError(GgufWriter()
                             .Header(0, 1)
                             .Key("a", GgufType::kArray)
                             .Raw<uint32_t>(99)
                             .Raw<uint64_t>(0)
                             .bytes()),
              HasSubstr("invalid type 99"));
  EXPECT_THAT(ParseError(GgufWriter()
                             .Header(0, 1)
                             .Key("b", GgufType::kBool)
                             .Raw<uint8_t>(2)
                             .Bytes("padding-padding")
                             .bytes()),
              HasSubstr("key 'b' is a bool with byte value 2"));
  EXPECT_THAT(ParseError(GgufWriter()
                             .Header(0, 2)
                             .Key("k", GgufType::kUint8)
                             .Raw<uint8_t>(1)
                             .Key("k", GgufType::kUint8)
                             .Raw<uint8_t>(2)
                             .bytes()),
              HasSubstr("duplicate key 'k'"));
  EXPECT_THAT(
      ParseError(GgufWriter().Header(0, 1).Key("u", GgufType::kUint32).Raw<uint16_t>(7).bytes()),
      HasSubstr("truncated: the value of key 'u'"));
  // Arrays nested 20 deep.
  GgufWriter deep;
  deep.Header(0, 1).Key("deep", GgufType::kArray);
  for (int i = 0; i < 20; ++i) deep.Type(GgufType::kArray).Raw<uint64_t>(1);
  deep.Type(GgufType::kUint8).Raw<uint64_t>(0);
  EXPECT_THAT(ParseError(deep.bytes()), HasSubstr("nests arrays more than 8 deep"));
  EXPECT_THAT(ParseError(GgufWriter()
                             .Header(0, 1)
                             .Key("general.alignment", GgufType::kUint32)
                             .Raw<uint32_t>(48)
                             .bytes()),
              HasSubstr("general.alignment 48 is not a power of two"));
}

TEST(GgufTest, MalformedTensorInfosAreRejected) {
  auto one_tensor = [](const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    GgufWriter w;
    w.Header(1, 0).Tensor("t", dims, type, offset).PadTo(32).Bytes(std::string(data_bytes, '\0'));
    return w.bytes();
  };
  ASSERT_TRUE(Parse(one_tensor({4, 2}, 0, 0, 32)).ok());
  EXPECT_THAT(ParseError(one_tensor({4, 2}, 0, 0, 31)),
              HasSubstr("tensor 't' (32 bytes at data offset 0) runs past the end"));
  EXPECT_THAT(ParseError(one_tensor({4, 2}, 0, 16, 64)),
              HasSubstr("not a multiple of the alignment 32"));
  EXPECT_THAT(ParseError(one_tensor({4, 2}, 0, 1ull << 62, 64)), HasSubstr("runs past the end"));
  EXPECT_THAT(ParseError(one_tensor({1, 1, 1, 1, 1}, 0, 0, 64)),
              HasSubstr("has 5 dims (at most 4)"));
  EXPECT_THAT(ParseError(one_tensor({4}, 1000, 0, 64)), HasSubstr("unknown ggml type 1000"));
  EXPECT_THAT(ParseError(one_tensor({1ull << 40, 1ull << 40}, 0, 0, 64)),
              HasSubstr("overflows int64"));
  EXPECT_THAT(ParseError(one_tensor({33}, 8, 0, 64)),
              HasSubstr("not a multiple of its block size 32"));
  GgufWriter two;
  two.Header(2, 0)
      .Tensor("t", {1}, 0, 0)
      .Tensor("t", {1}, 0, 32)
      .PadTo(32)
      .Bytes(std::string(64, '\0'));
  EXPECT_THAT(ParseError(two.bytes()), HasSubstr("duplicate tensor 't'"));
}

// Arbitrary bytes give an error or a file, never a crash: every prefix of a valid file, random
// byte flips in it, and random flips in the real vocab file's metadata.
TEST(GgufTest, CorruptedFilesNeverCrash) {
  const std::string good = AllTypesFile();
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(Parse(good.substr(0, n)).ok()) << "prefix " << n;
  }
  std::mt19937 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bad = good;
    for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
      bad[rng() % bad.size()] = static_cast<char>(rng());
    }
    StatusOr<GgufFile> gguf = Parse(bad);
    if (!gguf.ok()) {
      EXPECT_FALSE(gguf.status().message().empty());
    }
  }
  const std::string real =
      ReadFileBytes(SharedPath("models/llamacpp_vocab/ggml-vocab-llama-spm.gguf"));
  for (size_t n = 0; n < 4096; n += 7) EXPECT_FALSE(Parse(real.substr(0, n)).ok());
  for (int trial = 0; trial < 20; ++trial) {
    std::string bad = real;
    bad[rng() % 2048] = static_cast<char>(rng());
    (void)Parse(bad).ok();
  }
}

}  // namespace
}  // namespace tinyserve
