// Server addresses as users write them: "unix:///run/maru/maru.sock" or
// "tcp://host:port" (a bare "/path" is taken as a Unix socket).
#pragma once

#include <string>
#include <string_view>

#include "status.h"

namespace maru {

constexpr const char *kDefaultServerAddress = "unix:///run/maru/maru.sock";

struct Address {
  enum class Kind { kUnix, kTcp } kind = Kind::kUnix;
  std::string path;  // kUnix
  std::string host;  // kTcp
  int port = 0;      // kTcp

  // The target string gRPC understands ("unix:/path", "host:port").
  std::string GrpcTarget() const;
  std::string ToString() const;
};

Result<Address> ParseAddress(std::string_view text);

}  // namespace maru
