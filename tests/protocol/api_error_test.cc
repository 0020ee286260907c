#include "server/protocol/api_error.h"

#include <gtest/gtest.h>

#include "server/protocol/json_fields.h"

namespace tinyserve::protocol {
namespace {

TEST(ApiErrorTest, BadRequestJsonHasVllmShape) {
  ApiError e = ApiError::BadRequest("temperature must be non-negative, got -1.0.", "temperature");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.ToJson().dump(),
            R"({"error":{"message":"temperature must be non-negative, got -1.0.",)"
            R"("type":"BadRequestError","param":"temperature","code":400}})");
}

TEST(ApiErrorTest, NullParam) {
  EXPECT_EQ(ApiError::Unauthorized().ToJson().dump(),
            R"({"error":{"message":"Unauthorized","type":"AuthenticationError",)"
            R"("param":null,"code":401}})");
}

TEST(ApiErrorTest, TypesByStatus) {
  EXPECT_STREQ(ApiErrorTypeFor(400), "BadRequestError");
  EXPECT_STREQ(ApiErrorTypeFor(401), "AuthenticationError");
  EXPECT_STREQ(ApiErrorTypeFor(404), "NotFoundError");
  EXPECT_STREQ(ApiErrorTypeFor(405), "MethodNotAllowedError");
  EXPECT_STREQ(ApiErrorTypeFor(413), "RequestEntityTooLargeError");
  EXPECT_STREQ(ApiErrorTypeFor(503), "ServiceUnavailableError");
  EXPECT_STREQ(ApiErrorTypeFor(500), "InternalServerError");
  EXPECT_STREQ(ApiErrorTypeFor(418), "InternalServerError");
}

TEST(ApiErrorTest, ModelNotFoundUsesVllmMessage) {
  ApiError e = ApiError::ModelNotFound("gpt-4");
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.message, "The model `gpt-4` does not exist.");
  EXPECT_EQ(e.type, "NotFoundError");
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(e.code, 404);
}

TEST(ApiErrorTest, PayloadTooLargeAndUnavailable) {
  EXPECT_EQ(ApiError::PayloadTooLarge("too big").http_status, 413);
  EXPECT_EQ(ApiError::PayloadTooLarge("too big").type, "RequestEntityTooLargeError");
  EXPECT_EQ(ApiError::Unavailable("queue full").http_status, 503);
  EXPECT_EQ(ApiError::Unavailable("queue full").type, "ServiceUnavailableError");
}

TEST(ApiErrorTest, FromStatusMapsCodes) {
  EXPECT_EQ(ApiError::FromStatus(InvalidArgument("x")).http_status, 400);
  EXPECT_EQ(ApiError::FromStatus(OutOfRange("x")).http_status, 400);
  EXPECT_EQ(ApiError::FromStatus(NotFound("x")).http_status, 404);
  EXPECT_EQ(ApiError::FromStatus(ResourceExhausted("x")).http_status, 503);
  EXPECT_EQ(ApiError::FromStatus(Unavailable("x")).http_status, 503);
  EXPECT_EQ(ApiError::FromStatus(Aborted("x")).http_status, 503);
  ApiError internal = ApiError::FromStatus(Internal("boom"), "prompt");
  EXPECT_EQ(internal.http_status, 500);
  EXPECT_EQ(internal.type, "InternalServerError");
  EXPECT_EQ(internal.message, "boom");
  EXPECT_EQ(internal.param, "prompt");
}

TEST(ApiErrorOrTest, HoldsValueOrError) {
  ApiErrorOr<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  ApiErrorOr<int> e = ApiError::BadRequest("no");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "no");
}

TEST(ParseJsonBodyTest, MalformedJsonIs400) {
  auto r = ParseJsonBody("{\"prompt\": ");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().http_status, 400);
  EXPECT_EQ(r.error().message.rfind("Invalid JSON body: ", 0), 0u);
  EXPECT_FALSE(r.error().param.has_value());
}

TEST(ParseJsonBodyTest, InvalidUtf8Is400) {
  auto r = ParseJsonBody("{\"prompt\": \"a\xFF\"}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().http_status, 400);
}

TEST(ParseJsonBodyTest, NonObjectIs400) {
  for (const char* body : {"[]", "3", "\"x\"", "null", ""}) {
    auto r = ParseJsonBody(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.error().http_status, 400) << body;
  }
  EXPECT_EQ(ParseJsonBody("[1]").error().message, "The request body must be a JSON object");
}

// Issue 16: a body nested ~140,000 deep crashed a worker (nlohmann's copy recursed per level).
TEST(ParseJsonBodyTest, NestingDeeperThanTheLimitIs400BeforeParsing) {
  auto nested = [](int depth, char open, char close) {
    std::string s = "{\"prompt\": ";
    for (int i = 1; i < depth; ++i) s += open == '{' ? "{\"a\": " : "[";
    s += "1";
    for (int i = 1; i < depth; ++i) s += close;
    return s + "}";
  };
  EXPECT_TRUE(ParseJsonBody(nested(kMaxJsonDepth, '[', ']')).ok());
  EXPECT_TRUE(ParseJsonBody(nested(kMaxJsonDepth, '{', '}')).ok());
  for (const std::string& body :
       {nested(kMaxJsonDepth + 1, '[', ']'), nested(kMaxJsonDepth + 1, '{', '}'),
        nested(140000, '[', ']'), nested(140000, '{', '}'), std::string(140000, '[')}) {
    auto r = ParseJsonBody(body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().http_status, 400);
    EXPECT_NE(r.error().message.find("limit of 64 levels"), std::string::npos) << r.error().message;
  }
}

TEST(ParseJsonBodyTest, BracketsInStringsDoNotCountTowardsTheDepth) {
  const std::string deep_text(1000, '[');
  auto r = ParseJsonBody("{\"prompt\": \"" + deep_text + "\\\"{{{\", \"x\": [\"]]]\"]}");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)["prompt"], deep_text + "\"{{{");
  EXPECT_TRUE(JsonDepthAtMost("[[]]", 2));
  EXPECT_FALSE(JsonDepthAtMost("[[[]]]", 2));
  EXPECT_FALSE(
      JsonDepthAtMost("[\"\\\\\", [[]]]", 2));  // an escaped backslash ends before the quote
}

TEST(JsonFieldsTest, IntegralFloatIsAnInteger) {
  nlohmann::json body = {{"n", 2.0}, {"m", 2.5}, {"big", 3000000000LL}, {"b", true}};
  std::optional<int32_t> v;
  EXPECT_FALSE(GetInt32(body, "n", "n", &v).has_value());
  EXPECT_EQ(v, 2);
  auto e = GetInt32(body, "m", "m", &v);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "`m` must be an integer, got a number");
  e = GetInt32(body, "big", "big", &v);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "`big` must be a 32-bit integer");
  e = GetInt32(body, "b", "b", &v);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "`b` must be an integer, got a boolean");
  EXPECT_EQ(e->param, "b");
}

}  // namespace
}  // namespace tinyserve::protocol
