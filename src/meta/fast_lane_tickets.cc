#include "meta/fast_lane_tickets.h"

#include <sys/random.h>

#include <cstring>

namespace maru {
namespace {

bool Random(void *buf, size_t len) {
  auto *p = static_cast<uint8_t *>(buf);
  while (len > 0) {
    const ssize_t n = getrandom(p, len, 0);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool SameSecret(const std::string &a, const std::string &b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

std::string FastLaneTickets::Mint(const Grant &grant) {
  std::string ticket(kTicketBytes, '\0');
  if (!Random(ticket.data(), ticket.size())) return "";
  uint64_t id;
  memcpy(&id, ticket.data(), kIdBytes);
  MutexLock lock(&mu_);
  if (by_id_.count(id)) return "";  // 2^-64: the client uses gRPC
  // The queue keeps redeemed ids until they reach its front: bound it too.
  while (by_id_.size() >= kMaxTickets || order_.size() >= 2 * kMaxTickets) {
    by_id_.erase(order_.front());
    order_.pop_front();
  }
  by_id_[id] = Entry{ticket.substr(kIdBytes), grant};
  order_.push_back(id);
  return ticket;
}

std::optional<FastLaneTickets::Grant> FastLaneTickets::Redeem(const std::string &ticket) {
  if (ticket.size() != kTicketBytes) return std::nullopt;
  uint64_t id;
  memcpy(&id, ticket.data(), kIdBytes);
  MutexLock lock(&mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  Entry entry = std::move(it->second);
  by_id_.erase(it);
  if (!SameSecret(entry.secret, ticket.substr(kIdBytes))) return std::nullopt;
  return entry.grant;
}

size_t FastLaneTickets::outstanding() const {
  MutexLock lock(&mu_);
  return by_id_.size();
}

}  // namespace maru
