// The fast lane: the hot data-path calls (those in fast_lane_ops.inc) over
// a plain Unix socket next to the gRPC one, carrying the same protobuf
// messages in a minimal frame. A gRPC unary call costs ~130-200 µs here, most
// of it thread hand-offs inside gRPC; a Unix-socket round trip costs ~45 µs.
// Everything else, and every client that cannot use it, stays on gRPC.
//
// Frame, both ways: u32 payload length (little-endian), u8 code, payload.
// Requests carry an operation as code; replies carry 0 (the payload is the
// reply message) or kBadFrame (the request could not be parsed).
//
// Over TCP a connection opens with one kHello frame: a ticket the server
// handed out over an authenticated gRPC call (meta/fast_lane_tickets.h),
// then the caller's bearer token if it has one. The reply is kReplyOk with
// the ticket for the client's next connection, or kBadFrame and the end of
// the connection. Every request then names the ticket's session.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace maru::fastlane {

// kLookupPrefix, kOpen, ...: the request codes.
#define MARU_FAST_OP(Code, Name, Req, Rep) constexpr uint8_t k##Name = Code;
#include "fast_lane_ops.inc"
#undef MARU_FAST_OP
constexpr uint8_t kReplyOk = 0;
constexpr uint8_t kBadFrame = 255;
constexpr uint8_t kHello = 254;
constexpr uint32_t kMaxHello = 4096;  // a ticket and a token
constexpr uint8_t kRequestCodes[] = {
#define MARU_FAST_OP(Code, Name, Req, Rep) Code,
#include "fast_lane_ops.inc"
#undef MARU_FAST_OP
};
// One past the highest request code.
constexpr uint8_t kOpLimit =
    1 + *std::max_element(std::begin(kRequestCodes), std::end(kRequestCodes));
#define MARU_FAST_OP(Code, Name, Req, Rep)                               \
  static_assert(Code != kReplyOk && Code != kBadFrame && Code != kHello, \
                #Name ": reply and hello codes are not requests");
#include "fast_lane_ops.inc"
#undef MARU_FAST_OP
constexpr uint32_t kMaxPayload = 16u << 20;
constexpr const char *kSuffix = ".fast";  // the socket's path: the gRPC socket's + this

}  // namespace maru::fastlane
