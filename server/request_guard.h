// RequestGuard: the checks the front end makes on a request's head before its body is read
// (issue 16), each answered with vLLM's error JSON and the connection closed after the answer (the
// transport then reads nothing more from it, so no unread body is ever parsed as a request):
//   400  more than one Content-Length, or one that is not a decimal number; Content-Length with
//        Transfer-Encoding (ambiguous framing)
//   413  a Content-Length over the body limit (a chunked body over it is cut off at the limit by
//        the transport, which then closes the connection without an answer)
//   411  a Transfer-Encoding other than `chunked`, and a POST to a JSON route with neither
//        Content-Length nor chunked framing
//   415  a Content-Encoding other than identity, or more than one (no request body is
//        inflated); on the JSON
//        routes, a Content-Type whose media type is not application/json (vLLM's rule; it also
//        stops web pages from sending "simple" cross-origin POSTs)
// No route serves byte ranges: a Range header is ignored (a whole 200).
// Plain functions; thread-safe.
#pragma once

#include <cstddef>
#include <optional>

#include "server/http_message.h"
#include "server/protocol/api_error.h"

namespace tinyserve {

// The error to answer for a request whose head is refused, or nullopt. `json_route`: the request
// is a POST to a route that parses a JSON body; `max_body_bytes`: the body limit.
std::optional<protocol::ApiError> CheckRequestHead(const HttpRequest& req, bool json_route,
                                                   size_t max_body_bytes);

// Sets `res` to the error JSON, to be sent with `Connection: close` and the connection closed.
void SetErrorAndClose(HttpResponse& res, const protocol::ApiError& error);

}  // namespace tinyserve
