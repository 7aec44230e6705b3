#include "meta/client_limits.h"

#include <cerrno>

#include "meta/session_table.h"

namespace maru {
namespace {

bool Over(uint32_t limit, size_t have) {
  return limit != 0 && have > limit;
}

// Whether `s` may hold one more of something it holds `have` of.
int MayHoldMore(uint32_t limit, const Session &s, size_t have) {
  if (s.uid == 0) return 0;  // maru-fuse's one session per mount; root maps the pool anyway
  return limit != 0 && have >= limit ? EMFILE : 0;
}

}  // namespace

int CheckKeys(const Limits &limits, size_t keys) {
  return Over(limits.keys_per_call, keys) ? E2BIG : 0;
}

int CheckSessionStrings(const Limits &limits, const rpc::OpenSessionRequest &req) {
  if (Over(limits.client_name_bytes, req.client().size()) ||
      Over(limits.hostname_bytes, req.hostname().size()) ||
      Over(limits.instance_bytes, req.instance().size()))
    return ENAMETOOLONG;
  return 0;
}

int CheckLease(const Limits &limits, const Session &s) {
  return MayHoldMore(limits.leases_per_session, s, s.leases.size());
}

int CheckReservation(const Limits &limits, const Session &s) {
  return MayHoldMore(limits.reservations_per_session, s, s.reservations.size());
}

// Counted apart from reservations: Publish turns one into the other.
int CheckAllocation(const Limits &limits, const Session &s) {
  return MayHoldMore(limits.reservations_per_session, s, s.orphan_gens.size());
}

int CheckPin(const Limits &limits, const Session &s) {
  return MayHoldMore(limits.pins_per_session, s, s.pins);
}

}  // namespace maru
