#include "server/protocol/tool_spec.h"

namespace tinyserve::protocol {
namespace {

using Json = nlohmann::ordered_json;

void Dump(const Json& v, int indent, int depth, std::string* out) {
  const bool pretty = indent >= 0;
  auto newline = [&](int d) {
    out->push_back('\n');
    out->append(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  if (v.is_object()) {
    if (v.empty()) return out->append("{}"), void();
    out->push_back('{');
    bool first = true;
    for (const auto& [key, item] : v.items()) {
      if (!first) out->append(pretty ? "," : ", ");
      first = false;
      if (pretty) newline(depth + 1);
      out->append(Json(key).dump(-1, ' ', false, Json::error_handler_t::replace));
      out->append(": ");
      Dump(item, indent, depth + 1, out);
    }
    if (pretty) newline(depth);
    out->push_back('}');
    return;
  }
  if (v.is_array()) {
    if (v.empty()) return out->append("[]"), void();
    out->push_back('[');
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out->append(pretty ? "," : ", ");
      if (pretty) newline(depth + 1);
      Dump(v[i], indent, depth + 1, out);
    }
    if (pretty) newline(depth);
    out->push_back(']');
    return;
  }
  out->append(v.dump(-1, ' ', false, Json::error_handler_t::replace));
}

}  // namespace

bool IsValidToolName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string PythonJsonDumps(const Json& value, int indent) {
  std::string out;
  Dump(value, indent, 0, &out);
  return out;
}

}  // namespace tinyserve::protocol
