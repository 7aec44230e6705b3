#include "meta/quota_table.h"

#include <algorithm>
#include <cerrno>

#include "alloc/extent.h"

namespace maru {

namespace {

bool IsSet(QuotaTable::Limit l) {
  return l.bytes != 0 || l.pins != 0;
}

template <typename Map, typename Key>
void SetIn(Map &map, Key key, QuotaTable::Limit limit) {
  if (IsSet(limit))
    map[key].limit = limit;
  else
    map.erase(key);
}

}  // namespace

void QuotaTable::SetDir(uint64_t ino, Limit limit) {
  SetIn(dirs_, ino, limit);
  Recompute();
}

void QuotaTable::SetUid(uint32_t uid, Limit limit) {
  SetIn(uids_, uid, limit);
  Recompute();
}

void QuotaTable::Load(const std::vector<schema::Quota> &records, uint64_t unit) {
  unit_ = unit ? unit : 1;
  for (const schema::Quota &q : records) {
    Limit limit{q.bytes(), q.pins()};
    if (q.by_uid())
      SetIn(uids_, static_cast<uint32_t>(q.id()), limit);
    else if (const Inode *dir = tree_.Find(q.id()); dir && dir->is_dir())
      SetIn(dirs_, q.id(), limit);
  }
  Recompute();
}

uint64_t QuotaTable::Footprint(const Inode &file) {
  uint64_t bytes = 0;
  if (file.current) bytes += TotalLength(file.current->extents);
  if (file.pending) bytes += TotalLength(file.pending->extents);
  return bytes;
}

// Depth is small (a handful of directories), and only quota'd ones are
// looked up in a map that is usually empty.
std::vector<uint64_t> QuotaTable::QuotaDirs(const Inode &dir) const {
  std::vector<uint64_t> out;
  if (dirs_.empty()) return out;
  for (const Inode *d = &dir; d;) {
    if (dirs_.count(d->ino)) out.push_back(d->ino);
    if (d->parent == d->ino || d->parent == 0) break;
    d = tree_.Find(d->parent);
  }
  return out;
}

Status QuotaTable::MayReserve(const Inode &dir, uint32_t uid, uint64_t bytes) const {
  if (empty() || bytes == 0) return Status::Ok();
  bytes = (bytes + unit_ - 1) / unit_ * unit_;
  auto over = [bytes](const Entry &e) {
    return e.limit.bytes && e.used.bytes + bytes > e.limit.bytes;
  };
  if (auto u = uids_.find(uid); u != uids_.end() && over(u->second))
    return Status::Error(EDQUOT, "uid " + std::to_string(uid) + " is over its quota");
  for (uint64_t ino : QuotaDirs(dir))
    if (over(dirs_.at(ino))) return Status::Error(EDQUOT, "the directory is over its quota");
  return Status::Ok();
}

Status QuotaTable::MayGrow(const Inode &file, uint64_t bytes) const {
  if (empty()) return Status::Ok();
  const Inode *dir = tree_.Find(file.parent);
  return dir ? MayReserve(*dir, file.uid, bytes) : Status::Ok();
}

Status QuotaTable::MayReserveAt(std::string_view path, uint32_t uid, uint64_t bytes) const {
  if (empty()) return Status::Ok();
  const Inode *dir = tree_.root();
  while (dir) {
    while (!path.empty() && path.front() == '/') path.remove_prefix(1);
    const size_t slash = path.find('/');
    if (slash == std::string_view::npos) break;  // the rest names the file
    const Inode *next = tree_.Child(*dir, path.substr(0, slash));
    if (!next || !next->is_dir()) break;
    dir = next;
    path.remove_prefix(slash);
  }
  return dir ? MayReserve(*dir, uid, bytes) : Status::Ok();
}

void QuotaTable::Moved(const Inode &a, const Inode *b) {
  if (empty()) return;
  if (a.is_dir() || (b && b->is_dir())) return Recompute();
  Update(a);
  if (b) Update(*b);
}

QuotaTable::Usage QuotaTable::Subtree(const Inode &top) const {
  Usage u;
  std::vector<const Inode *> todo{&top};
  while (!todo.empty()) {
    const Inode *at = todo.back();
    todo.pop_back();
    if (at->is_file()) {
      u.bytes += Footprint(*at);
      u.pins += at->pinned;
    }
    if (!at->is_dir()) continue;
    for (const auto &[name, ino] : at->children)
      if (const Inode *child = tree_.Find(ino)) todo.push_back(child);
  }
  return u;
}

Status QuotaTable::MayMove(const Inode &src, const Inode &from, const Inode &to, const Inode *dst,
                           bool exchange) const {
  if (dirs_.empty()) return Status::Ok();
  const std::vector<uint64_t> above_to = QuotaDirs(to), above_from = QuotaDirs(from);
  if (above_to.empty() && !(exchange && dst && !above_from.empty())) return Status::Ok();
  const Usage moved = Subtree(src), there = dst ? Subtree(*dst) : Usage{};
  auto has = [](const std::vector<uint64_t> &v, uint64_t ino) {
    return std::find(v.begin(), v.end(), ino) != v.end();
  };
  // A directory above both sees no change; one above the target gains what
  // moves in and loses what it replaces; one above the source gains what
  // an exchange sends back.
  auto grows = [&](uint64_t ino, uint64_t Usage::*field) {
    const int64_t in = has(above_to, ino), out = has(above_from, ino);
    return (in - out) * static_cast<int64_t>(moved.*field) +
           (exchange ? out - in : -in) * static_cast<int64_t>(there.*field);
  };
  for (const std::vector<uint64_t> *dirs : {&above_to, &above_from})
    for (uint64_t ino : *dirs) {
      const Entry &e = dirs_.at(ino);
      const int64_t bytes = grows(ino, &Usage::bytes), pins = grows(ino, &Usage::pins);
      if (e.limit.bytes && bytes > 0 && e.used.bytes + bytes > e.limit.bytes)
        return Status::Error(EDQUOT, "the target directory would pass its quota");
      if (e.limit.pins && pins > 0 && e.used.pins + pins > e.limit.pins)
        return Status::Error(EDQUOT, "the target directory would pass its pins quota");
    }
  return Status::Ok();
}

Status QuotaTable::MayPin(const Inode &file) const {
  if (empty() || file.pinned) return Status::Ok();
  auto over = [](const Entry &e) { return e.limit.pins && e.used.pins + 1 > e.limit.pins; };
  if (auto u = uids_.find(file.uid); u != uids_.end() && over(u->second))
    return Status::Error(EDQUOT, "uid " + std::to_string(file.uid) + " holds its quota of pins");
  if (const Inode *dir = tree_.Find(file.parent))
    for (uint64_t ino : QuotaDirs(*dir))
      if (over(dirs_.at(ino))) return Status::Error(EDQUOT, "the directory holds its pins quota");
  return Status::Ok();
}

void QuotaTable::Apply(const Charge &c, int sign) {
  auto add = [&](Entry &e) {
    e.used.bytes += sign > 0 ? c.bytes : -c.bytes;
    if (c.pinned) e.used.pins += sign > 0 ? 1 : -1;
  };
  if (c.by_uid)
    if (auto u = uids_.find(c.uid); u != uids_.end()) add(u->second);
  for (uint64_t ino : c.dirs)
    if (auto d = dirs_.find(ino); d != dirs_.end()) add(d->second);
}

void QuotaTable::Update(const Inode &file) {
  if (empty()) return;
  Forget(file.ino);
  Charge c;
  c.bytes = Footprint(file);
  c.pinned = file.pinned;
  c.uid = file.uid;
  c.by_uid = uids_.count(file.uid) > 0;
  if (const Inode *dir = tree_.Find(file.parent)) c.dirs = QuotaDirs(*dir);
  if (!c.by_uid && c.dirs.empty()) return;
  Apply(c, +1);
  charged_.emplace(file.ino, std::move(c));
}

void QuotaTable::Forget(uint64_t ino) {
  auto it = charged_.find(ino);
  if (it == charged_.end()) return;
  Apply(it->second, -1);
  charged_.erase(it);
}

QuotaTable::Charge QuotaTable::HeldCharge(uint32_t uid, uint64_t bytes) const {
  Charge c;
  c.bytes = bytes;
  c.uid = uid;
  c.by_uid = uids_.count(uid) > 0;
  if (const Inode *root = tree_.root(); root && dirs_.count(root->ino)) c.dirs.push_back(root->ino);
  return c;
}

void QuotaTable::Hold(uint64_t gen, uint32_t uid, uint64_t bytes) {
  Unhold(gen);
  Charge c = HeldCharge(uid, bytes);
  Apply(c, +1);
  held_.emplace(gen, std::move(c));
}

void QuotaTable::Unhold(uint64_t gen) {
  auto it = held_.find(gen);
  if (it == held_.end()) return;
  Apply(it->second, -1);
  held_.erase(it);
}

void QuotaTable::HoldRead(uint64_t gen, uint32_t uid, uint64_t bytes) {
  auto [it, added] = reads_[gen].try_emplace(uid);
  if (!added) return;
  it->second = HeldCharge(uid, bytes);
  Apply(it->second, +1);
}

void QuotaTable::UnholdRead(uint64_t gen, uint32_t uid) {
  auto readers = reads_.find(gen);
  if (readers == reads_.end()) return;
  if (auto it = readers->second.find(uid); it != readers->second.end()) {
    Apply(it->second, -1);
    readers->second.erase(it);
  }
  if (readers->second.empty()) reads_.erase(readers);
}

void QuotaTable::DropReads(uint64_t gen) {
  auto readers = reads_.find(gen);
  if (readers == reads_.end()) return;
  for (const auto &[uid, c] : readers->second) Apply(c, -1);
  reads_.erase(readers);
}

void QuotaTable::Recompute() {
  charged_.clear();
  for (auto &[ino, e] : dirs_) e.used = {};
  for (auto &[uid, e] : uids_) e.used = {};
  for (auto &[gen, c] : held_) c = HeldCharge(c.uid, c.bytes);  // quotas may have changed
  for (auto &[gen, readers] : reads_)
    for (auto &[uid, c] : readers) c = HeldCharge(uid, c.bytes);
  if (empty()) return;
  tree_.ForEach([this](const Inode &inode) {
    if (inode.is_file()) Update(inode);
  });
  for (const auto &[gen, c] : held_) Apply(c, +1);
  for (const auto &[gen, readers] : reads_)
    for (const auto &[uid, c] : readers) Apply(c, +1);
}

void QuotaTable::Fill(google::protobuf::RepeatedPtrField<rpc::QuotaInfo> *out) const {
  auto fill = [](const Entry &e, rpc::QuotaInfo *q) {
    q->set_limit_bytes(e.limit.bytes);
    q->set_used_bytes(e.used.bytes);
    q->set_limit_pins(e.limit.pins);
    q->set_used_pins(e.used.pins);
  };
  for (const auto &[ino, e] : dirs_) {
    rpc::QuotaInfo *q = out->Add();
    const Inode *dir = tree_.Find(ino);
    q->set_target(dir ? tree_.PathOf(*dir) : "(removed)");
    q->set_ino(ino);
    fill(e, q);
  }
  for (const auto &[uid, e] : uids_) {
    rpc::QuotaInfo *q = out->Add();
    q->set_target("uid:" + std::to_string(uid));
    q->set_by_uid(true);
    q->set_uid(uid);
    fill(e, q);
  }
}

schema::Quota QuotaTable::DirRecord(uint64_t ino, Limit limit) {
  schema::Quota q;
  q.set_id(ino);
  q.set_bytes(limit.bytes);
  q.set_pins(limit.pins);
  return q;
}

schema::Quota QuotaTable::UidRecord(uint32_t uid, Limit limit) {
  schema::Quota q = DirRecord(uid, limit);
  q.set_by_uid(true);
  return q;
}

}  // namespace maru
