#include "structured/synthetic_vocab.h"

#include <cassert>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/hash.h"

namespace tinyserve::structured {

std::shared_ptr<const Vocabulary> SyntheticVocabulary(int32_t size, uint64_t seed) {
  assert(size >= 300);
  std::vector<std::string> tokens;
  std::unordered_set<std::string> seen;
  auto add = [&](const std::string& t) {
    if (static_cast<int32_t>(tokens.size()) >= size - 1 || t.empty()) return;
    if (seen.insert(t).second) tokens.push_back(t);
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  for (const char* t : {"{\"",
                        "\":",
                        "\",",
                        "\":\"",
                        "\"}",
                        "},",
                        "}]",
                        "[{",
                        " \"",
                        "\": ",
                        ", \"",
                        "\"]",
                        "[]",
                        "{}",
                        "null",
                        "true",
                        "false",
                        " null",
                        " true",
                        " false",
                        "\\n",
                        "\\\"",
                        "\\\\",
                        "\\u",
                        "  ",
                        "    ",
                        "\n ",
                        "\n  ",
                        " {",
                        " [",
                        "\",\"",
                        "\"},{\"",
                        "\":{\"",
                        "\":[",
                        "],",
                        "]}",
                        "\xC3\xA9",
                        "\xE6\x97\xA5\xE6\x9C\xAC",
                        "\xF0\x9F\x98\x80",
                        "\xE2\x82",
                        "\xAC ",
                        "-0",
                        ".0",
                        "e+",
                        "E-",
                        "0.",
                        "1e",
                        "00",
                        "-1",
                        "12",
                        "2023-",
                        "-01",
                        "T1",
                        ":00",
                        "Z\"",
                        "@",
                        ".com",
                        "-4",
                        "abc",
                        "def"}) {
    add(t);
  }
  for (int n = 0; n < 100; ++n) add(std::to_string(n));
  uint64_t state = seed;
  auto next = [&] {
    state = SplitMix64(state);
    return state;
  };
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  while (static_cast<int32_t>(tokens.size()) < size - 1) {
    const int len = 2 + static_cast<int>(next() % 7);
    std::string word;
    for (int i = 0; i < len; ++i) {
      // Skewed toward the frequent letters, as real vocabularies are.
      const uint64_t r = next() % 100;
      word += letters[r < 60 ? r % 8 : r < 90 ? 8 + r % 10 : 18 + r % 8];
    }
    switch (next() % 8) {
      case 0:
      case 1:
      case 2:
        add(" " + word);
        break;
      case 3:
        add(word);
        break;
      case 4:
        word[0] = static_cast<char>(word[0] - 'a' + 'A');
        add(" " + word);
        break;
      case 5:
        add("\"" + word);
        break;
      case 6:
        add(word + "\"");
        break;
      default:
        add(" \"" + word + "\":");
        break;
    }
  }
  tokens.emplace_back();  // the stop token
  const int32_t stop = static_cast<int32_t>(tokens.size()) - 1;
  return std::make_shared<const Vocabulary>(std::move(tokens), std::vector<int32_t>{stop});
}

}  // namespace tinyserve::structured
