// Tickets that admit a TCP connection to the fast lane (docs/security.md,
// "The fast lane over TCP"). A TCP caller proves who it is to gRPC (a
// token, or a verified client certificate); the server then hands it, over
// that authenticated call, a ticket: 32 random bytes naming one session and
// the uid and gid the caller proved. A new fast-lane connection presents
// the ticket first; the ticket is gone once presented, right or wrong, and
// the connection acts as that uid for that session only. Each admitted
// connection is handed the next ticket, for the client's next connection.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

#include "util/mutex.h"

namespace maru {

class FastLaneTickets {
 public:
  struct Grant {
    uint64_t session = 0;
    uint32_t uid = 0;
    uint32_t gid = 0;
  };
  static constexpr size_t kTicketBytes = 32;
  // Outstanding tickets at most; past it the oldest is forgotten (its
  // holder then uses gRPC until its next session reply).
  static constexpr size_t kMaxTickets = 1 << 16;

  // A new ticket for `grant`: kTicketBytes bytes, or empty when the
  // system's random source fails (no ticket then, the client uses gRPC).
  std::string Mint(const Grant &grant) EXCLUDES(mu_);
  // What `ticket` grants, once: it is forgotten whether or not it matched.
  std::optional<Grant> Redeem(const std::string &ticket) EXCLUDES(mu_);
  size_t outstanding() const EXCLUDES(mu_);

 private:
  // A ticket is an 8-byte id, the key here, and a 24-byte secret compared
  // in constant time: a lookup's timing tells nothing of the secret.
  static constexpr size_t kIdBytes = 8;
  struct Entry {
    std::string secret;
    Grant grant;
  };
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Entry> by_id_ GUARDED_BY(mu_);
  std::deque<uint64_t> order_ GUARDED_BY(mu_);  // ids, oldest first (some redeemed)
};

}  // namespace maru
