#pragma once
// Whether the client of a request is still connected, from inside a plain handler.
//
// Why: a non-streaming response must choose its status (200, or 500 when the engine fails half
// way) after generation, so it cannot be a content provider (httplib 0.11 writes the status line
// before a provider runs); but a plain handler gets no socket to poll for a hang-up, and a
// vanished client must cancel its requests. The connection's socket is still open while its
// handler runs (httplib closes it afterwards), so it is found once by its addresses: the socket
// whose peer is (remote_addr, remote_port) and whose local port is local_port.
#include <string>

namespace httplib {
struct Request;
}

namespace rs::server {

class ClientConnection {
 public:
  explicit ClientConnection(const httplib::Request& req);
  // False once the peer has closed or reset the connection. True when the socket could not be
  // found (then a vanished client is noticed only when the response is written).
  bool alive() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// The open socket in this process whose peer is (peer_addr, peer_port) and whose local port is
// local_port, or -1 (Linux: walks /proc/self/fd).
int find_connection_socket(const std::string& peer_addr, int peer_port, int local_port);

}  // namespace rs::server
