#pragma once
// State shared by the Server and its routes (internal to src/server/).
#include <atomic>
#include <memory>
#include <mutex>

#include "server/metrics.h"
#include "server/server.h"

namespace httplib { class Server; }

namespace rs::server {

struct ServerState {
  ServerState(ServerConfig c, std::string model_name) : cfg(std::move(c)), metrics(std::move(model_name)) {}
  ServerConfig cfg;
  Metrics metrics;
  std::atomic<bool> draining{false};

  std::shared_ptr<const ServedModel> model() const {
    std::lock_guard<std::mutex> lk(mu_);
    return model_;
  }
  void set_model(std::shared_ptr<const ServedModel> m) {
    std::lock_guard<std::mutex> lk(mu_);
    model_ = std::move(m);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const ServedModel> model_;
};

void register_routes(httplib::Server& http, ServerState& st);

}  // namespace rs::server
