// The client side of the fast lane (src/proto/fast_lane.h): a few
// connections to the server, each used by one call at a time. Over a Unix
// socket the kernel tells the server who is calling; over TCP each new
// connection first presents a ticket (and the caller's token, if it has
// one), and is answered with the ticket for the next one.
#pragma once

#include <google/protobuf/message_lite.h>

#include <string>
#include <vector>

#include "util/address.h"
#include "util/mutex.h"

namespace maru {

class FastLaneClient {
 public:
  FastLaneClient(std::string path, int64_t timeout_ms);
  // Over TCP to `server`, with `ticket` for the first connection.
  FastLaneClient(Address server, std::string token, std::string ticket, int64_t timeout_ms);
  ~FastLaneClient();
  FastLaneClient(const FastLaneClient &) = delete;
  FastLaneClient &operator=(const FastLaneClient &) = delete;

  // One request, one reply. 0, or a negative errno when the lane failed:
  // -ETIMEDOUT if the server did not answer in time, another errno if the
  // connection could not be made or broke (use gRPC then).
  int Call(uint8_t op, const google::protobuf::MessageLite &req,
           google::protobuf::MessageLite *rep);
  // TCP: the ticket of a new session (a resume), for the next connection.
  // Connections of the old session are refused by the server from now on.
  void SetTicket(std::string ticket) EXCLUDES(mu_);

 private:
  int Checkout() EXCLUDES(mu_);
  void Checkin(int fd) EXCLUDES(mu_);
  // A new connected socket with timeouts, or a negative errno.
  int Connect();
  // TCP: presents a ticket on `fd`; 0 or a negative errno (-EACCES: refused).
  int Hello(int fd) EXCLUDES(mu_);

  const std::string path_;  // Unix
  const Address server_;    // TCP
  const bool tcp_ = false;
  const std::string token_;  // TCP: the caller's bearer token, or empty
  const int64_t timeout_ms_;
  Mutex mu_;
  std::vector<int> idle_ GUARDED_BY(mu_);  // connected, not in a call
  std::string ticket_ GUARDED_BY(mu_);     // TCP: for the next connection
};

}  // namespace maru
