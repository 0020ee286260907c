#include "models/tokenizer/ggml_type.h"

namespace tinyserve {
namespace {

// ggml's type table (ggml.h, enum ggml_type). Removed types keep their slot with size 0.
constexpr GgmlTypeTraits kGgmlTypes[] = {
    {"f32", 1, 4},        {"f16", 1, 2},       {"q4_0", 32, 18},     {"q4_1", 32, 20},
    {"q4_2", 0, 0},       {"q4_3", 0, 0},      {"q5_0", 32, 22},     {"q5_1", 32, 24},
    {"q8_0", 32, 34},     {"q8_1", 32, 36},    {"q2_K", 256, 84},    {"q3_K", 256, 110},
    {"q4_K", 256, 144},   {"q5_K", 256, 176},  {"q6_K", 256, 210},   {"q8_K", 256, 292},
    {"iq2_xxs", 256, 66}, {"iq2_xs", 256, 74}, {"iq3_xxs", 256, 98}, {"iq1_s", 256, 50},
    {"iq4_nl", 32, 18},   {"iq3_s", 256, 110}, {"iq2_s", 256, 82},   {"iq4_xs", 256, 136},
    {"i8", 1, 1},         {"i16", 1, 2},       {"i32", 1, 4},        {"i64", 1, 8},
    {"f64", 1, 8},        {"iq1_m", 256, 56},  {"bf16", 1, 2},
};
constexpr uint32_t kNumGgmlTypes = sizeof(kGgmlTypes) / sizeof(kGgmlTypes[0]);

}  // namespace

const GgmlTypeTraits* FindGgmlType(uint32_t ggml_type) {
  return ggml_type < kNumGgmlTypes ? &kGgmlTypes[ggml_type] : nullptr;
}

const char* GgmlTypeName(uint32_t ggml_type) {
  return ggml_type < kNumGgmlTypes ? kGgmlTypes[ggml_type].name : "unknown";
}

}  // namespace tinyserve
