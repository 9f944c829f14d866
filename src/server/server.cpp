#include "server/server.h"

#include <thread>

#include <httplib.h>

#include "common/error.h"
#include "server/server_state.h"

namespace rs::server {

struct Server::Impl {
  Impl(ServerConfig cfg, std::string name) : st(std::move(cfg), std::move(name)) {}
  ServerState st;
  httplib::Server http;
  std::thread listener;
  bool bound = false;
};

Server::Server(ServerConfig cfg, std::string model_name_for_metrics)
    : impl_(std::make_unique<Impl>(std::move(cfg), std::move(model_name_for_metrics))) {
  auto& http = impl_->http;
  const int threads = std::max(4, impl_->st.cfg.http_threads);
  // One streaming response holds a worker for its whole life: size the pool for the
  // concurrency we promise, not for the core count (httplib's default).
  http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http.set_payload_max_length(impl_->st.cfg.max_body_bytes);
  // A stalled reader must not pin a worker forever, but a slow CPU decode must not trip this.
  http.set_write_timeout(std::chrono::seconds(30));
  http.set_keep_alive_timeout(2);  // idle keep-alive connections delay a graceful shutdown by this much
  register_routes(http, impl_->st);
}

Server::~Server() {
  if (impl_->listener.joinable()) {
    impl_->http.stop();
    impl_->listener.join();
  }
}

int Server::bind() {
  const auto& c = impl_->st.cfg;
  int port = c.port;
  if (c.port == 0) {
    port = impl_->http.bind_to_any_port(c.host);
    if (port < 0) throw Error("cannot bind " + c.host + " to any port");
  } else if (!impl_->http.bind_to_port(c.host, c.port)) {
    throw Error("cannot bind " + c.host + ":" + std::to_string(c.port) +
                " (in use, or not an address of this machine?)");
  }
  impl_->bound = true;
  return port;
}

void Server::start() {
  if (!impl_->bound) bind();
  impl_->listener = std::thread([this] { impl_->http.listen_after_bind(); });
  // stop() is a no-op until the listener runs; wait so begin_shutdown never races it.
  for (int i = 0; i < 2000 && !impl_->http.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Server::set_ready(ServedModel model) {
  impl_->st.set_model(std::make_shared<const ServedModel>(std::move(model)));
}

void Server::begin_shutdown() {
  impl_->st.draining = true;
  impl_->http.stop();
}

void Server::wait() {
  if (impl_->listener.joinable()) impl_->listener.join();
}

Metrics& Server::metrics() { return impl_->st.metrics; }

}  // namespace rs::server
