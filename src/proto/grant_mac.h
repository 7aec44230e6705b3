// Grants: the MAC that lets maru-agent believe what maru-server says about a
// remote client's access without asking it again. The server computes it
// when it issues a grant; the agent, which got the key at RegisterAgent,
// recomputes it. See docs/security.md ("maru-agent").
#pragma once

#include <cstdint>
#include <string>

#include "maru.pb.h"

namespace maru {

constexpr size_t kGrantKeyBytes = 32;
// The longest a grant lasts: access through an agent ends at most this long
// after the lease or reservation behind it (see docs/security.md).
constexpr uint32_t kMaxGrantTtlMs = 5000;

// A fresh random key (from OpenSSL's CSPRNG); empty if none could be drawn.
std::string NewGrantKey();
// HMAC-SHA256 over a fixed encoding of every field of `grant` but `mac`.
std::string GrantMac(const std::string &key, const rpc::Grant &grant);
// Whether `grant.mac` is GrantMac(key, grant), compared in constant time.
bool GrantMacValid(const std::string &key, const rpc::Grant &grant);

}  // namespace maru
