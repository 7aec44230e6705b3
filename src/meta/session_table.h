// Client sessions. Every client (a library user, a FUSE daemon, a tool)
// opens one and keeps it alive with heartbeats; what it holds (leases,
// reservations) is released when it closes or stops heartbeating.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace maru {

struct Session {
  uint64_t id = 0;
  std::string client;
  std::string hostname;
  std::string instance;  // the client's name for itself, if it gave one
  uint32_t pid = 0;
  uint32_t uid = 0;          // set at Create, never changed (SessionTable counts by it)
  int64_t since_ns = 0;      // realtime, for display
  int64_t last_seen_ns = 0;  // monotonic
  // Known only from reservations found in the database at start; waits
  // for its client to come back (resume) until it times out.
  bool orphaned = false;
  std::unordered_set<uint64_t> leases;        // lease ids
  std::unordered_set<uint64_t> reservations;  // inodes whose pending version it writes
  // Generations it is still writing whose file was unlinked or replaced.
  std::unordered_set<uint64_t> orphan_gens;
  uint64_t pins = 0;  // pins it set that it has not taken back (client_limits.h caps them)
};

class SessionTable {
 public:
  Session *Create(uint64_t id, uint32_t uid);
  Session *Find(uint64_t id);
  void Remove(uint64_t id);
  // Sessions not seen for `timeout_ns` as of `now_ns`.
  std::vector<uint64_t> Expired(int64_t now_ns, int64_t timeout_ns) const;
  // Counts every session as seen at `now_ns`: at the end of a start, so
  // that the time the start took counts against no client that must
  // resume (on a loaded host it can exceed the session timeout).
  void SeenAll(int64_t now_ns) {
    for (auto &[id, s] : sessions_) s.last_seen_ns = now_ns;
  }
  size_t size() const { return sessions_.size(); }
  // Sessions of `uid` (live or orphaned).
  uint32_t CountOf(uint32_t uid) const {
    auto it = per_uid_.find(uid);
    return it == per_uid_.end() ? 0 : it->second;
  }
  template <typename F>
  void ForEach(F &&f) const {
    for (const auto &[id, s] : sessions_) f(s);
  }

 private:
  std::unordered_map<uint64_t, Session> sessions_;
  std::unordered_map<uint32_t, uint32_t> per_uid_;
};

}  // namespace maru
