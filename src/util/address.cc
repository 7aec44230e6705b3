#include "address.h"

#include <cstdlib>

namespace maru {

std::string Address::GrpcTarget() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  if (host.find(':') != std::string::npos) return "ipv6:[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string Address::ToString() const {
  if (kind == Kind::kUnix) return "unix://" + path;
  if (host.find(':') != std::string::npos) return "tcp://[" + host + "]:" + std::to_string(port);
  return "tcp://" + host + ":" + std::to_string(port);
}

Result<Address> ParseAddress(std::string_view text) {
  Address a;
  if (text.starts_with("unix://") || text.starts_with("/")) {
    a.kind = Address::Kind::kUnix;
    a.path = std::string(text.starts_with("/") ? text : text.substr(7));
    if (a.path.empty() || a.path[0] != '/')
      return Status::Error(EINVAL, "unix address needs an absolute path: unix:///path/to/sock");
    if (a.path.size() >= 108) return Status::Error(ENAMETOOLONG, "unix socket path too long");
    return a;
  }
  if (!text.starts_with("tcp://"))
    return Status::Error(
        EINVAL, "address must be unix:///PATH or tcp://HOST:PORT, not '" + std::string(text) + "'");
  std::string_view rest = text.substr(6);
  size_t colon;
  if (rest.starts_with("[")) {
    size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
      return Status::Error(EINVAL, "bad IPv6 address, expected tcp://[ADDR]:PORT");
    a.host = std::string(rest.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
      return Status::Error(EINVAL, "tcp address needs HOST:PORT");
    a.host = std::string(rest.substr(0, colon));
  }
  std::string port(rest.substr(colon + 1));
  char *end = nullptr;
  long p = strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535)
    return Status::Error(EINVAL, "bad tcp port '" + port + "'");
  a.kind = Address::Kind::kTcp;
  a.port = static_cast<int>(p);
  return a;
}

}  // namespace maru
