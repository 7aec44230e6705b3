// What maru-agent and its remote clients say to each other over UCX active
// messages. The bytes themselves move with one-sided get/put; only these
// small control messages are two-sided.
#pragma once

#include <cstdint>

namespace maru::wire {

constexpr unsigned kGrantRequestId = 1;  // client -> agent
constexpr unsigned kGrantReplyId = 2;    // agent -> client
constexpr uint32_t kMaxGrantExtents = 256;
constexpr uint32_t kMaxGrantBytes = 16384;
constexpr uint32_t kMaxRkeyBytes = 4096;

// "Here is what maru-server granted me (an rpc::Grant, serialized): let me
// reach those extents." The agent verifies the grant's MAC and expiry
// itself and asks the server only whether it was revoked.
struct GrantRequest {
  uint64_t request_id;
  uint32_t grant_bytes;
  uint32_t reserved;
  uint8_t grant[];  // `grant_bytes` of them
};

// The answer: where the device is mapped in the agent and one packed remote
// key per extent of the grant, in its order, each covering just that extent
// (none when `error` is set). Each key is a uint32_t length, then the key.
struct GrantReply {
  uint64_t request_id;
  int32_t error;  // positive errno, 0 = granted
  uint32_t count;
  uint64_t remote_base;
  uint8_t rkeys[];
};

}  // namespace maru::wire
