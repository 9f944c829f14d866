#pragma once
// Every failure a client can cause becomes OpenAI's error object, in one place:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Handlers throw ApiError (or let rs::Error / QueueFullError / JSON errors escape); the route
// wrapper catches them and calls write_error. Status codes: 400 invalid request, 401 bad key,
// 404 unknown model or route, 413 body too large, 429 queue full, 503 loading or shutting down.
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace httplib { struct Response; }

namespace rs::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::optional<std::string> param = std::nullopt)
      : std::runtime_error(message), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::optional<std::string>& param() const { return param_; }

 private:
  int status_;
  std::optional<std::string> param_;
};

// OpenAI's "type" for a status (invalid_request_error, authentication_error, ...).
const char* error_type_for_status(int status);
nlohmann::json error_body(int status, const std::string& message,
                          const std::optional<std::string>& param = std::nullopt);
// The JSON text of error_body, safe for any bytes in `message` (invalid UTF-8 is replaced).
std::string error_json(int status, const std::string& message,
                       const std::optional<std::string>& param = std::nullopt);
void write_error(httplib::Response& res, int status, const std::string& message,
                 const std::optional<std::string>& param = std::nullopt);

// Turns the exception in flight into an error response; call from a catch (...) block.
// Maps ApiError -> its status, QueueFullError -> 429, rs::Error and JSON errors -> 400,
// anything else -> 500 (and logs it: that is a bug).
void write_current_exception(httplib::Response& res);
// The same mapping for a stream that has already started: the status, message and param.
ApiError classify_current_exception();

// JSON text for responses: invalid UTF-8 (e.g. a token that is half a character) is replaced
// by U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& j);

}  // namespace rs::server
