// The fast lane: the hot data-path calls (LookupPrefix, Open, Release,
// Create, Seal, Abort, their batched forms, CountPrefix, Alloc, Publish) over
// a plain Unix socket next to the gRPC one, carrying the same protobuf
// messages in a minimal frame. A gRPC unary call costs ~130-200 µs here, most
// of it thread hand-offs inside gRPC; a Unix-socket round trip costs ~45 µs.
// Everything else, and every client that cannot use it, stays on gRPC.
//
// Frame, both ways: u32 payload length (little-endian), u8 code, payload.
// Requests carry an operation as code; replies carry 0 (the payload is the
// reply message) or kBadFrame (the request could not be parsed).
#pragma once

#include <cstdint>

namespace maru::fastlane {

constexpr uint8_t kLookupPrefix = 1;
constexpr uint8_t kOpen = 2;
constexpr uint8_t kRelease = 3;
constexpr uint8_t kCreate = 4;
constexpr uint8_t kSeal = 5;
constexpr uint8_t kAbort = 6;
constexpr uint8_t kCreateBatch = 7;
constexpr uint8_t kSealBatch = 8;
constexpr uint8_t kCountPrefix = 9;
constexpr uint8_t kAlloc = 10;
constexpr uint8_t kPublish = 11;
constexpr uint8_t kReplyOk = 0;
constexpr uint8_t kBadFrame = 255;
constexpr uint32_t kMaxPayload = 16u << 20;
constexpr const char *kSuffix = ".fast";  // the socket's path: the gRPC socket's + this

}  // namespace maru::fastlane
