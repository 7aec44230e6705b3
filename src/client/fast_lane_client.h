// The client side of the fast lane (src/proto/fast_lane.h): a few Unix
// socket connections to the server, each used by one call at a time.
#pragma once

#include <google/protobuf/message_lite.h>

#include <mutex>
#include <string>
#include <vector>

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
  int Checkout();
  void Checkin(int fd);

  const std::string path_;
  const int64_t timeout_ms_;
  std::mutex mu_;
  std::vector<int> idle_;
};

}  // namespace maru
