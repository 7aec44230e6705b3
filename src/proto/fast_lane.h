// The fast lane: the hot data-path calls (those in fast_lane_ops.inc) over
// a plain Unix socket next to the gRPC one, carrying the same protobuf
// messages in a minimal frame. A gRPC unary call costs ~130-200 µs here, most
// of it thread hand-offs inside gRPC; a Unix-socket round trip costs ~45 µs.
// Everything else, and every client that cannot use it, stays on gRPC.
//
// Frame, both ways: u32 payload length (little-endian), u8 code, payload.
// Requests carry an operation as code; replies carry 0 (the payload is the
// reply message) or kBadFrame (the request could not be parsed).
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
constexpr uint8_t kRequestCodes[] = {
#define MARU_FAST_OP(Code, Name, Req, Rep) Code,
#include "fast_lane_ops.inc"
#undef MARU_FAST_OP
};
// One past the highest request code.
constexpr uint8_t kOpLimit =
    1 + *std::max_element(std::begin(kRequestCodes), std::end(kRequestCodes));
#define MARU_FAST_OP(Code, Name, Req, Rep) \
  static_assert(Code != kReplyOk && Code != kBadFrame, #Name ": reply codes are not requests");
#include "fast_lane_ops.inc"
#undef MARU_FAST_OP
constexpr uint32_t kMaxPayload = 16u << 20;
constexpr const char *kSuffix = ".fast";  // the socket's path: the gRPC socket's + this

}  // namespace maru::fastlane
