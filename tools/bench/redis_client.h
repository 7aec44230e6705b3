// A minimal Redis client (RESP over TCP) for maru-bench: what users who
// share KV chunks by transfer run today, measured beside Maru.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace maru::bench {

class RedisClient {
 public:
  ~RedisClient();
  static Result<RedisClient *> Connect(const std::string &host, int port);

  // SET key value (value: `len` bytes at `data`).
  Status Set(const std::string &key, const void *data, uint64_t len);
  // GET key into `out` (resized); NotFound (ENOENT) when absent.
  Status Get(const std::string &key, std::string *out);
  // One round trip: which of `keys` exist, in order.
  Status Exists(const std::vector<std::string> &keys, std::vector<bool> *found);
  // One round trip: the values of `keys` (missing ones come back empty and
  // are flagged false in `found`).
  Status MGet(const std::vector<std::string> &keys, std::vector<std::string> *values,
              std::vector<bool> *found);
  // Sends any command; the reply is discarded unless it is an error.
  Status Command(const std::vector<std::string> &args);

 private:
  explicit RedisClient(int fd) : fd_(fd) {}
  void Append(const std::vector<std::pair<const void *, uint64_t>> &args);
  Status Flush();
  Status ReadLine(std::string *line);
  Status ReadExact(void *dst, uint64_t len);
  // Reads one reply; a bulk string lands in `bulk` (nil: *nil = true).
  Status ReadReply(std::string *bulk, bool *nil, int64_t *integer);

  int fd_;
  std::string out_;
  std::vector<char> in_;
  size_t in_pos_ = 0, in_len_ = 0;
};

}  // namespace maru::bench
