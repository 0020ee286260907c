// HttpRouter: the server's table of routes, method and exact path -> handler.
//
// Route() runs the handler of the request's method and path; HEAD runs the GET handler (the
// transport sends no body for HEAD). A path with handlers for other methods only gets 405, an
// unknown path 404, both with the error JSON (server/error_json.h). Add every route before the
// first Route(); then the router is read-only and thread-safe.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>

#include "server/http_message.h"

namespace tinyserve {

class HttpRouter {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;

  void Get(const std::string& path, Handler handler) { Add("GET", path, std::move(handler)); }
  void Post(const std::string& path, Handler handler) { Add("POST", path, std::move(handler)); }
  void Add(const std::string& method, const std::string& path, Handler handler) {
    routes_[path][method] = std::move(handler);
  }
  // Runs the handler for `req` (see above) into `res`.
  void Route(const HttpRequest& req, HttpResponse& res) const;

 private:
  std::map<std::string, std::map<std::string, Handler>> routes_;  // path -> method -> handler
};

}  // namespace tinyserve
