// Length-prefixed frames on a stream socket: u32 length (little-endian),
// u8 code, then `length` bytes. Used by the fast lane.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace maru {

// Writes one frame; EPIPE/ECONNRESET when the peer is gone.
Status WriteFrame(int fd, uint8_t code, const std::string &payload);
// Reads one frame; ECONNRESET at end of stream, EMSGSIZE if it is longer
// than `max`.
Status ReadFrame(int fd, uint8_t *code, std::string *payload, uint32_t max);

}  // namespace maru
