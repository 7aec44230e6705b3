// The client side of the fast lane (src/proto/fast_lane.h): a few Unix
// socket connections to the server, each used by one call at a time.
#pragma once

#include <google/protobuf/message_lite.h>

#include <string>
#include <vector>

#include "util/mutex.h"

namespace maru {

class FastLaneClient {
 public:
  FastLaneClient(std::string path, int64_t timeout_ms);
  ~FastLaneClient();
  FastLaneClient(const FastLaneClient &) = delete;
  FastLaneClient &operator=(const FastLaneClient &) = delete;

  // One request, one reply. 0, or a negative errno when the lane failed:
  // -ETIMEDOUT if the server did not answer in time, another errno if the
  // connection could not be made or broke (use gRPC then).
  int Call(uint8_t op, const google::protobuf::MessageLite &req,
           google::protobuf::MessageLite *rep);

 private:
  int Checkout() EXCLUDES(mu_);
  void Checkin(int fd) EXCLUDES(mu_);

  const std::string path_;
  const int64_t timeout_ms_;
  Mutex mu_;
  std::vector<int> idle_ GUARDED_BY(mu_);  // connected, not in a call
};

}  // namespace maru
