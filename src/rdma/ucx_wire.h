// What maru-agent and its remote clients say to each other over UCX active
// messages. On the RMA data path the bytes move with one-sided get/put and
// only grants are two-sided. On the checked data path (TCP, where UCX does
// not enforce remote keys: docs/security.md) the bytes move two-sided too:
// reads and writes name a ticket the agent gave for a verified grant, and
// the agent checks every range before it copies.
#pragma once

#include <cstdint>

namespace maru::wire {

constexpr unsigned kGrantRequestId = 1;  // client -> agent
constexpr unsigned kGrantReplyId = 2;    // agent -> client
constexpr unsigned kReadRequestId = 3;   // client -> agent (checked path)
constexpr unsigned kReadReplyId = 4;     // agent -> client: DataReply + the bytes
constexpr unsigned kWriteRequestId = 5;  // client -> agent: DataRequest + the bytes
constexpr unsigned kWriteReplyId = 6;    // agent -> client
constexpr uint32_t kReplyChecked = 1;    // GrantReply::flags: use the checked path
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
// With kReplyChecked in `flags` there are no keys: `remote_base` is the
// ticket the client names in its DataRequests instead.
struct GrantReply {
  uint64_t request_id;
  int32_t error;  // positive errno, 0 = granted
  uint32_t count;
  uint64_t remote_base;
  uint32_t flags;
  uint32_t reserved;
  uint8_t rkeys[];
};

// The header of a read or write on the checked path: `length` bytes at
// `offset` of the ticket's device, which must lie inside one extent of it.
struct DataRequest {
  uint64_t request_id;
  uint64_t ticket;
  uint64_t offset;
  uint64_t length;
};

// The header of the answer; a read's bytes follow as its data (none on an
// error).
struct DataReply {
  uint64_t request_id;
  int32_t error;  // positive errno, 0 = done
  uint32_t reserved;
};

}  // namespace maru::wire
