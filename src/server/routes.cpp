// Every HTTP route, each wrapped once for authentication, readiness and error mapping.
#include <atomic>
#include <chrono>
#include <cstdio>

#include <httplib.h>

#include "server/auth.h"
#include "server/client_connection.h"
#include "server/errors.h"
#include "server/generation.h"
#include "server/ids.h"
#include "server/server_state.h"
#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace rs::server {

using nlohmann::json;

namespace {

using ModelPtr = std::shared_ptr<const ServedModel>;

enum class Needs { Nothing, Auth, AuthAndModel };

// The one wrapper: authentication, readiness, then the handler; any exception becomes an
// OpenAI error object with its status, and the server carries on.
template <class F>
void api(ServerState& st, const httplib::Request& req, httplib::Response& res, Needs needs, F&& fn) {
  try {
    if (needs != Needs::Nothing && !authorized(st.cfg.api_key, req.get_header_value("Authorization"))) {
      throw ApiError(401, req.has_header("Authorization")
                              ? "Incorrect API key provided."
                              : "Missing API key: send 'Authorization: Bearer <key>'.");
    }
    ModelPtr m = st.model();
    if (needs == Needs::AuthAndModel) {
      if (st.draining) throw ApiError(503, "The server is shutting down.");
      if (!m) throw ApiError(503, "The model is still loading; retry when /health returns 200.");
    }
    fn(m);
  } catch (...) {
    write_current_exception(res);
  }
  if (res.status >= 400) st.metrics.count_http_error(res.status);
}


int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void generate(ServerState& st, const httplib::Request& req, httplib::Response& res, const ModelPtr& m,
              ApiKind kind) {
  json body = parse_json_body(req.body);
  auto job = std::make_shared<GenerationJob>();
  job->req = kind == ApiKind::Chat ? parse_chat_request(body, m->ctx) : parse_completion_request(body, m->ctx);
  // Validate every prompt before submitting any, so a bad one leaves nothing running.
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < job->req.prompts.size(); ++i)
    reqs.push_back(make_generation_request(job->req, i, m->ctx));
  try {
    for (auto& g : reqs) job->handles.push_back(m->engine->submit(std::move(g)));
  } catch (...) {
    cancel_all(*job);  // e.g. the queue filled up half way through a batch of prompts
    throw;
  }
  job->id = random_id(kind == ApiKind::Chat ? "chatcmpl" : "cmpl");
  job->created = unix_now();
  job->tokenizer = m->ctx.tokenizer;
  job->metrics = &st.metrics;
  job->poll = st.cfg.poll;
  if (job->req.stream) {
    // The provider runs after this handler returns; it owns the job and the model reference.
    // It does all its work in one call: httplib checks for shutdown only between calls, and a
    // graceful shutdown must let running responses finish.
    const auto keepalive = st.cfg.sse_keepalive;
    auto release = [job](bool success) {
      if (!success) cancel_all(*job);
    };
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, m, keepalive](size_t, httplib::DataSink& sink) {
          SseWriter out(sink, keepalive);
          if (!stream_response(*job, out)) return false;
          sink.done();
          return true;
        },
        release);
  } else {
    // Generated here, before the status is chosen: an engine failure half way is a 500, not an
    // error object under a 200 already sent (client_connection.h says why no provider).
    const ClientConnection client(req);
    std::optional<std::string> text;
    try {
      text = collect_response(*job, [&] { return client.alive(); });
    } catch (...) {
      cancel_all(*job);  // the other choices of the response, if one failed
      throw;
    }
    if (!text) return;  // the client went away: its requests are cancelled, nobody to answer
    res.status = 200;
    res.set_content(std::move(*text), "application/json");
  }
}

json models_json(const ServedModel& m) {
  json data = json::array();
  for (const auto& name : m.ctx.served_names) {
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", m.created},
                    {"owned_by", "rackserve"},
                    {"root", m.ctx.served_names.at(0)},
                    {"parent", nullptr},
                    {"max_model_len", m.ctx.max_model_len},
                    {"vocab_size", m.ctx.vocab_size},
                    {"random_weights", m.random_weights},
                    {"description", m.description}});
  }
  return {{"object", "list"}, {"data", std::move(data)}};
}

void reply_json(httplib::Response& res, const json& j) {
  res.status = 200;
  res.set_content(dump_json(j), "application/json");
}

}  // namespace

void register_routes(httplib::Server& http, ServerState& st) {
  http.Get("/health", [&st](const httplib::Request& req, httplib::Response& res) {
    api(st, req, res, Needs::Nothing, [&](const ModelPtr& m) {
      if (st.draining) throw ApiError(503, "The server is shutting down.");
      if (!m) throw ApiError(503, "The model is still loading.");
      res.status = 200;
    });
  });
  http.Get("/metrics", [&st](const httplib::Request& req, httplib::Response& res) {
    api(st, req, res, Needs::Nothing, [&](const ModelPtr& m) {
      std::optional<EngineStats> stats;
      if (m) stats = m->engine->stats();
      res.set_content(st.metrics.render(stats ? &*stats : nullptr), "text/plain; version=0.0.4; charset=utf-8");
    });
  });
  http.Get("/v1/models", [&st](const httplib::Request& req, httplib::Response& res) {
    api(st, req, res, Needs::AuthAndModel, [&](const ModelPtr& m) { reply_json(res, models_json(*m)); });
  });
  http.Post("/v1/chat/completions", [&st](const httplib::Request& req, httplib::Response& res) {
    api(st, req, res, Needs::AuthAndModel, [&](const ModelPtr& m) { generate(st, req, res, m, ApiKind::Chat); });
  });
  http.Post("/v1/completions", [&st](const httplib::Request& req, httplib::Response& res) {
    api(st, req, res, Needs::AuthAndModel, [&](const ModelPtr& m) { generate(st, req, res, m, ApiKind::Completion); });
  });
  http.Post("/tokenize", [&st](const httplib::Request& req, httplib::Response& res) {
    api(st, req, res, Needs::AuthAndModel, [&](const ModelPtr& m) {
      reply_json(res, handle_tokenize(parse_json_body(req.body), m->ctx));
    });
  });
  http.Post("/detokenize", [&st](const httplib::Request& req, httplib::Response& res) {
    api(st, req, res, Needs::AuthAndModel, [&](const ModelPtr& m) {
      reply_json(res, handle_detokenize(parse_json_body(req.body), m->ctx));
    });
  });

  // Statuses httplib sets itself (unknown route, oversized body, malformed request line) get
  // the same error object; responses that already carry a body are left alone.
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [&st](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg;
    switch (res.status) {
      case 404: msg = "No route for " + req.method + " " + req.path + "."; break;
      case 413: msg = "Request body too large: the limit is " + std::to_string(st.cfg.max_body_bytes) + " bytes."; break;
      case 400: msg = "Malformed HTTP request."; break;
      default: msg = std::string(httplib::detail::status_message(res.status)) + ".";
    }
    write_error(res, res.status, msg);
    st.metrics.count_http_error(res.status);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([&st](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (...) {
      write_current_exception(res);
    }
    st.metrics.count_http_error(res.status);
  });
}

}  // namespace rs::server
