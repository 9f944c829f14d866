#pragma once
// The HTTP front door: cpp-httplib serving OpenAI's API over the Engine. It listens before the
// model is loaded (/health answers 503 until set_ready) so orchestrators see the process early.
//
// Threads: httplib's pool runs one handler per connection; a generation handler submits to the
// engine and returns a content provider that waits on the requests' event channels, writing
// chunks as they come and polling the socket, so a vanished client cancels its requests.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/openai_schema.h"

namespace rs::server {

class Metrics;

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() returns it)
  std::string api_key;  // empty: no authentication
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  int http_threads = 64;  // concurrent connections served; more wait in httplib's queue (serve: 0 = auto)
  std::chrono::milliseconds sse_keepalive{5000};  // comment frames while no token is due
  std::chrono::milliseconds poll{50};             // client-connection check period
};

// What the routes serve once the model is up. The engine must outlive the Server's wait().
struct ServedModel {
  Engine* engine = nullptr;
  ModelContext ctx;
  std::string description;  // shown in /v1/models
  bool random_weights = false;
  int64_t created = 0;  // unix seconds
};

class Server {
 public:
  Server(ServerConfig cfg, std::string model_name_for_metrics);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int bind();    // throws rs::Error when host:port cannot be bound; returns the bound port
  void start();  // serves on a background thread
  void set_ready(ServedModel model);
  // Stop accepting connections; requests arriving on open connections get 503. Running
  // responses continue until their requests finish (the engine's shutdown bounds that).
  void begin_shutdown();
  void wait();  // until the listener stopped and every in-flight response is written
  Metrics& metrics();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rs::server
