#include "server/protocol/api_error.h"

namespace tinyserve::protocol {

const char* ApiErrorTypeFor(int http_status) {
  switch (http_status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowedError";
    case 411:
      return "LengthRequiredError";
    case 413:
      return "RequestEntityTooLargeError";
    case 415:
      return "UnsupportedMediaTypeError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return "InternalServerError";
  }
}

int HttpStatusForCode(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
    case StatusCode::kAborted:
      return 503;
    default:
      return 500;
  }
}

nlohmann::ordered_json ApiError::ToJson() const {
  nlohmann::ordered_json error;
  error["message"] = message;
  error["type"] = type;
  error["param"] = param ? nlohmann::ordered_json(*param) : nlohmann::ordered_json(nullptr);
  error["code"] = code;
  nlohmann::ordered_json body;
  body["error"] = std::move(error);
  return body;
}

ApiError ApiError::Make(int http_status, std::string message, std::optional<std::string> param) {
  ApiError e;
  e.http_status = http_status;
  e.message = std::move(message);
  e.type = ApiErrorTypeFor(http_status);
  e.param = std::move(param);
  e.code = http_status;
  return e;
}

ApiError ApiError::BadRequest(std::string message, std::optional<std::string> param) {
  return Make(400, std::move(message), std::move(param));
}

ApiError ApiError::Unauthorized(std::string message) { return Make(401, std::move(message)); }

ApiError ApiError::ModelNotFound(const std::string& model) {
  return Make(404, "The model `" + model + "` does not exist.", "model");
}

ApiError ApiError::PayloadTooLarge(std::string message) { return Make(413, std::move(message)); }

ApiError ApiError::Unavailable(std::string message) { return Make(503, std::move(message)); }

ApiError ApiError::FromStatus(const Status& status, std::optional<std::string> param) {
  assert(!status.ok());
  return Make(HttpStatusForCode(status.code()), status.message(), std::move(param));
}

}  // namespace tinyserve::protocol
