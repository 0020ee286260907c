// HttpServer on a random loopback port: /health, /metrics (content type, the catalogue's text),
// JSON errors for unknown routes and oversized bodies, and a clean Stop().
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <exception>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "metrics/prometheus_metrics.h"
#include "server/error_json.h"

namespace tinyserve {
namespace {

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(ServerContext context, HttpServerOptions options = {}) {
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options, std::move(context));
    ASSERT_TRUE(server_->Bind().ok());
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Serve().ok()); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }

  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpServerTest, HealthIs200AndFollowsTheEngine) {
  std::atomic<bool> healthy{true};
  ServerContext context;
  context.is_healthy = [&healthy] { return healthy.load(); };
  Start(context);
  auto res = client_->Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  healthy = false;
  res = client_->Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  const auto body = nlohmann::json::parse(res->body);
  EXPECT_EQ(body["error"]["code"], 503);
}

TEST_F(HttpServerTest, MetricsServesThePrometheusText) {
  MetricsConfig config;
  config.model_name = "m";
  PrometheusMetrics metrics(config);
  metrics.num_requests_running.Set(3);
  ServerContext context;
  context.metrics = &metrics;
  Start(context);
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, metrics.Render());
  EXPECT_NE(res->body.find("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\n"),
            std::string::npos);
}

TEST_F(HttpServerTest, MetricsWithoutRegistryIs503) {
  Start(ServerContext{});
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
}

TEST_F(HttpServerTest, UnknownRouteGetsTheErrorJson) {
  Start(ServerContext{});
  auto res = client_->Get("/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  const auto body = nlohmann::json::parse(res->body);
  ASSERT_TRUE(body.contains("error"));
  const auto& e = body["error"];
  EXPECT_EQ(e["type"], "NotFoundError");
  EXPECT_EQ(e["code"], 404);
  EXPECT_TRUE(e["param"].is_null());
  EXPECT_EQ(e["message"], "Route GET /nope not found");
}

TEST_F(HttpServerTest, OversizedBodyIs413) {
  HttpServerOptions options;
  options.max_body_bytes = 16;
  Start(ServerContext{}, options);
  auto res = client_->Post("/metrics", std::string(1024, 'x'), "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_EQ(nlohmann::json::parse(res->body)["error"]["code"], 413);
}

TEST(HttpServerLifecycleTest, StopBeforeServeReturnsAtOnce) {
  HttpServerOptions options;
  options.port = 0;
  HttpServer server(options, ServerContext{});
  ASSERT_TRUE(server.Bind().ok());
  server.Stop();
  EXPECT_TRUE(server.Serve().ok());
}

TEST(HttpServerLifecycleTest, BindFailsOnAPortInUse) {
  HttpServerOptions options;
  options.port = 0;
  HttpServer first(options, ServerContext{});
  ASSERT_TRUE(first.Bind().ok());
  options.port = first.port();
  HttpServer second(options, ServerContext{});
  EXPECT_FALSE(second.Bind().ok());
}

// Issue 16: a handler's exception became a 500 carrying e.what() ("std::bad_alloc", or whatever
// text a library put there).
TEST(ErrorJsonTest, InternalErrorCarriesNothingOfTheException) {
  for (std::exception_ptr error :
       {std::make_exception_ptr(std::bad_alloc()),
        std::make_exception_ptr(std::runtime_error("secret /etc/tinyserve.key at 0x7ffd")),
        std::make_exception_ptr(42), std::exception_ptr()}) {
    HttpResponse res;
    SetInternalErrorResponse(res, error);
    EXPECT_EQ(res.status, 500);
    const auto body = nlohmann::json::parse(res.body);
    EXPECT_EQ(body["error"]["message"], "Internal server error");
    EXPECT_EQ(body["error"]["type"], "InternalServerError");
    EXPECT_EQ(res.body.find("secret"), std::string::npos);
    EXPECT_EQ(res.body.find("bad_alloc"), std::string::npos);
  }
}

TEST(ErrorJsonTest, ShapeAndStatusMapping) {
  const auto j = ErrorJson(400, "bad temperature", std::string("temperature"));
  EXPECT_EQ(j.dump(), R"({"error":{"message":"bad temperature","type":"BadRequestError",)"
                      R"("param":"temperature","code":400}})");
  EXPECT_EQ(HttpStatusFor(InvalidArgument("x")), 400);
  EXPECT_EQ(HttpStatusFor(NotFound("x")), 404);
  EXPECT_EQ(HttpStatusFor(Unavailable("x")), 503);
  EXPECT_EQ(HttpStatusFor(ResourceExhausted("x")), 503);
  EXPECT_EQ(HttpStatusFor(Internal("x")), 500);
}

}  // namespace
}  // namespace tinyserve
