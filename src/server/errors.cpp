#include "server/errors.h"

#include <cctype>
#include <cstdio>

#include <httplib.h>

#include "common/error.h"
#include "engine/engine.h"

namespace rs::server {

const char* error_type_for_status(int status) {
  switch (status) {
    case 400: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_exceeded";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

nlohmann::json error_body(int status, const std::string& message,
                          const std::optional<std::string>& param) {
  nlohmann::json err = {{"message", message},
                        {"type", error_type_for_status(status)},
                        {"param", param ? nlohmann::json(*param) : nlohmann::json(nullptr)},
                        {"code", status}};
  return {{"error", std::move(err)}};
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string error_json(int status, const std::string& message,
                       const std::optional<std::string>& param) {
  return dump_json(error_body(status, message, param));
}

void write_error(httplib::Response& res, int status, const std::string& message,
                 const std::optional<std::string>& param) {
  res.status = status;
  res.set_content(error_json(status, message, param), "application/json");
}

ApiError classify_current_exception() {
  try {
    throw;
  } catch (const ApiError& e) {
    return e;
  } catch (const QueueFullError& e) {
    return ApiError(429, e.what());
  } catch (const nlohmann::json::exception& e) {
    return ApiError(400, std::string("invalid JSON: ") + e.what());
  } catch (const Error& e) {
    // Request validation errors read "<param>: <problem>"; keep the param for the client.
    std::string msg = e.what();
    size_t k = 0;
    while (k < msg.size() && (std::islower(static_cast<unsigned char>(msg[k])) || msg[k] == '_')) ++k;
    if (k > 0 && msg.compare(k, 2, ": ") == 0) return ApiError(400, msg, msg.substr(0, k));
    return ApiError(400, msg);
  } catch (const std::bad_alloc&) {
    return ApiError(500, "out of memory while handling the request");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rackserve: internal error: %s\n", e.what());
    return ApiError(500, std::string("internal error: ") + e.what());
  } catch (...) {
    std::fprintf(stderr, "rackserve: internal error of unknown type\n");
    return ApiError(500, "internal error");
  }
}

void write_current_exception(httplib::Response& res) {
  ApiError e = classify_current_exception();
  write_error(res, e.status(), e.what(), e.param());
}

}  // namespace rs::server
