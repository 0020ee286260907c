// RequestGuard: the checks the front end makes on a request's head before cpp-httplib reads its
// body (issue 16), and the one way to answer that early.
//
// httplib 0.11.4 runs the pre-routing handler after the headers and before the body. An answer
// given there leaves the body unread, and httplib would parse it as the connection's next request
// (request smuggling past the API key). SendErrorAndClose() therefore sends the error with
// `Connection: close` through a content provider that, once the whole body is written, shuts
// the connection's sending side and drops what the client still sends (at most 16 MiB, 1 s:
// a lingering close, so the client reads the answer before the connection is reset), then
// reports a failure: httplib ends the connection instead of reading on.
//
// CheckRequestHead refuses, each with vLLM's error JSON:
//   400  more than one Content-Length, or one that is not a decimal number; Content-Length with
//        Transfer-Encoding (ambiguous framing); a body on a method whose body httplib does not
//        read (GET, HEAD, OPTIONS, ...: it would be parsed as the next request)
//   413  a Content-Length over the body limit (httplib would read and discard the whole body,
//        for as long as the client sends it, before its own 413)
//   411  any Transfer-Encoding (httplib 0.11.4 reads a chunked body without the body limit), and a
//        POST to a JSON route without Content-Length
//   415  a Content-Encoding other than identity (httplib would inflate a gzip body without the
//        body limit); on the JSON routes, a Content-Type whose media type is not application/json
//        (vLLM's rule; it also stops web pages from sending "simple" cross-origin POSTs)
// IgnoreRange drops Range from every request: no route serves byte ranges, and httplib would
// build one copy of the response per range (multipart/byteranges).
// Plain functions; thread-safe.
#pragma once

#include <cstddef>
#include <optional>

#include "server/protocol/api_error.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace tinyserve {

// The error to answer for a request whose head is refused, or nullopt. `json_route`: the request
// is a POST to a route that parses a JSON body; `max_body_bytes`: the body limit.
std::optional<protocol::ApiError> CheckRequestHead(const httplib::Request& req, bool json_route,
                                                   size_t max_body_bytes);

// Removes the Range header (and httplib's parsed ranges) from `req`. REQUIRES: called from the
// pre-routing handler (httplib hands it a const reference to its own, non-const, Request).
void IgnoreRange(const httplib::Request& req);

// Sets `res` to the error JSON with `Connection: close`; httplib closes the connection after
// sending it (see above). A HEAD request is answered as a GET (with the body): httplib calls no
// content provider for HEAD, and would keep the connection. REQUIRES: called from the pre-routing
// or the error handler (`req` is httplib's own, non-const, Request).
void SendErrorAndClose(const httplib::Request& req, httplib::Response& res,
                       const protocol::ApiError& error);

// After an answer on socket `fd`: sends FIN, then reads and drops what the client still sends
// (the body it is writing) for up to 1 s and 16 MiB, so that closing with unread bytes (which
// makes the kernel send a reset) does not destroy the answer before the client has read it.
void LingeringClose(int fd);

}  // namespace tinyserve
