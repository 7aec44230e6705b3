#include "meta/session_table.h"

namespace maru {

Session *SessionTable::Create(uint64_t id, uint32_t uid) {
  Session &s = sessions_[id];
  s.id = id;
  s.uid = uid;
  ++per_uid_[uid];
  return &s;
}

Session *SessionTable::Find(uint64_t id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

void SessionTable::Remove(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  if (auto n = per_uid_.find(it->second.uid); n != per_uid_.end() && --n->second == 0)
    per_uid_.erase(n);
  sessions_.erase(it);
}

std::vector<uint64_t> SessionTable::Expired(int64_t now_ns, int64_t timeout_ns) const {
  std::vector<uint64_t> out;
  for (const auto &[id, s] : sessions_)
    if (now_ns - s.last_seen_ns > timeout_ns) out.push_back(id);
  return out;
}

}  // namespace maru
