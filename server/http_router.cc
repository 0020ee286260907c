#include "server/http_router.h"

#include "server/error_json.h"

namespace tinyserve {

void HttpRouter::Route(const HttpRequest& req, HttpResponse& res) const {
  const auto path = routes_.find(req.path);
  if (path == routes_.end()) {
    SetErrorResponse(res, 404, "Route " + req.method + " " + req.path + " not found");
    return;
  }
  auto handler = path->second.find(req.method == "HEAD" ? std::string("GET") : req.method);
  if (handler == path->second.end()) {
    SetErrorResponse(res, 405, "Method " + req.method + " not allowed on " + req.path);
    return;
  }
  handler->second(req, res);
}

}  // namespace tinyserve
