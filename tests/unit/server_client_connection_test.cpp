// The accepted socket of a connection is found by its addresses, and a peer's close is seen.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include <httplib.h>

#include "server/client_connection.h"

using namespace rs::server;

TEST_SUITE("unit.server") {
TEST_CASE("find_connection_socket finds the accepted socket; a closed peer is not alive") {
  const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(ls >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(ls, 4) == 0);
  socklen_t al = sizeof a;
  REQUIRE(::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &al) == 0);
  const int server_port = ntohs(a.sin_port);

  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  sockaddr_in c{};
  socklen_t cl = sizeof c;
  REQUIRE(::getsockname(client, reinterpret_cast<sockaddr*>(&c), &cl) == 0);
  const int accepted = ::accept(ls, nullptr, nullptr);
  REQUIRE(accepted >= 0);

  // The accepted socket, not the client's own end (whose peer is the listening port).
  CHECK(find_connection_socket("127.0.0.1", ntohs(c.sin_port), server_port) == accepted);
  CHECK(find_connection_socket("127.0.0.1", ntohs(c.sin_port), server_port + 1) == -1);
  CHECK(find_connection_socket("127.0.0.2", ntohs(c.sin_port), server_port) == -1);

  // Pipelined bytes leave it alive; the peer's close does not.
  httplib::Request req;
  req.remote_addr = "127.0.0.1";
  req.remote_port = ntohs(c.sin_port);
  req.local_port = server_port;
  const ClientConnection conn(req);
  REQUIRE(conn.found());
  CHECK(conn.alive());
  REQUIRE(::send(client, "x", 1, 0) == 1);
  ::usleep(20000);
  CHECK(conn.alive());  // readable, and what is there is a byte, not the end
  ::close(client);
  bool gone = false;  // the FIN crosses loopback at once; allow a loaded machine 2 s
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = !conn.alive();
    if (!gone) ::usleep(10000);
  }
  CHECK(gone);
  ::close(accepted);
  ::close(ls);
}
}
