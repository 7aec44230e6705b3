// What maru-agent and its remote clients say to each other over UCX active
// messages. The bytes themselves move with one-sided get/put; only these
// small control messages are two-sided.
#pragma once

#include <cstdint>

namespace maru::wire {

constexpr unsigned kGrantRequestId = 1;  // client -> agent
constexpr unsigned kGrantReplyId = 2;    // agent -> client
constexpr uint32_t kMaxGrantExtents = 256;
constexpr uint32_t kMaxRkeyBytes = 4096;

// "May I reach these extents of device `device`?" The agent asks maru-server
// whether `session` holds a lease or reservation covering them.
struct GrantRequest {
  uint64_t request_id;
  uint64_t session;
  uint32_t device;
  uint32_t count;
  struct {
    uint64_t offset;
    uint64_t length;
  } extents[];  // `count` of them
};

// The answer: where the device is mapped in the agent and the packed remote
// key for it (empty when `error` is set).
struct GrantReply {
  uint64_t request_id;
  int32_t error;  // positive errno, 0 = granted
  uint32_t rkey_bytes;
  uint64_t remote_base;
  uint8_t rkey[];  // `rkey_bytes` of them
};

}  // namespace maru::wire
