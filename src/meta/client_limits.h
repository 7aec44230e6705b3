// What one client may ask of the server: caps on the size of a request and
// on what one session may hold. Each check is a positive errno (0: within
// the limit), taken before the operation does any work, so that a hostile
// request costs the server no more than a refused one.
//
// Sessions opened by root are not capped per session: maru-fuse holds one
// session for a whole mount (every caller's open files are its leases), and
// root can map the pool anyway. A value of 0 means no limit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/maru.pb.h"

namespace maru {

struct Session;

struct Limits {
  uint32_t keys_per_call = 4096;             // paths per lookup or batch (E2BIG)
  uint32_t client_name_bytes = 64;           // OpenSession's client (ENAMETOOLONG)
  uint32_t hostname_bytes = 255;             // ... hostname (ENAMETOOLONG)
  uint32_t instance_bytes = 64;              // ... instance (ENAMETOOLONG)
  uint32_t leases_per_session = 65536;       // open chunks (EMFILE)
  uint32_t reservations_per_session = 4096;  // unsealed writes, and apart from
                                             // them lease-free allocations (EMFILE)
  uint32_t pins_per_session = 65536;         // pins it set (EMFILE)
  uint32_t sessions_per_uid = 1024;          // sessions one uid other than root holds (EMFILE)
};

// E2BIG when a call names more than `keys_per_call` keys.
int CheckKeys(const Limits &limits, size_t keys);
// ENAMETOOLONG when a string the session is described by is too long.
int CheckSessionStrings(const Limits &limits, const rpc::OpenSessionRequest &req);
// EMFILE when `s` may not take one more lease, reservation or pin.
int CheckLease(const Limits &limits, const Session &s);
int CheckReservation(const Limits &limits, const Session &s);
int CheckAllocation(const Limits &limits, const Session &s);
int CheckPin(const Limits &limits, const Session &s);

}  // namespace maru
