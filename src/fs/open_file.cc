#include "fs/open_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "util/cache_flush.h"
#include "util/log.h"

namespace maru {
namespace {

using Stub = rpc::Meta::Stub;
constexpr uint64_t kMinGrowth = 1 << 20;  // a writer's reservation grows by at least this

// Room for `end` bytes where `have` are reserved: `ask(size)` for a step
// ahead (doubling, at least kMinGrowth), so that a file written in small
// pieces costs few calls; where the step does not fit and the write may
// (ENOSPC, EDQUOT, or EFBIG: the step is larger than the pool), half the
// step, down to just `end`. (Exactly `end` a write at a time would cost a
// fragment each, and a chunk has at most 64.)
template <typename Ask>
int Grow(uint64_t have, uint64_t end, Ask &&ask) {
  uint64_t want = std::max({end, have * 2, kMinGrowth});
  for (;;) {
    const int rc = ask(want);
    if ((rc != -ENOSPC && rc != -EDQUOT && rc != -EFBIG) || want == end) return rc;
    want = std::max(end, have + (want - have) / 2);
  }
}

}  // namespace

OpenFile::OpenFile(const FileEnv *env, uint64_t ino, Role role)
    : env_(env), ino_(ino), role_(role) {}

OpenFile::~OpenFile() {
  if (writer() && !sealed_ && gen_) {  // leave no unfinished version behind
    rpc::HandleRequest r;
    r.set_ino(ino_);
    r.set_gen(gen_);
    rpc::ErrorReply rep;
    env_->client->Call(&Stub::Abort, r, &rep, &caller_);
  }
  ReleaseLease();
}

void OpenFile::ReleaseLease() {
  if (lease_) env_->client->ReleaseLease(lease_);
  lease_ = 0;
}

int OpenFile::MapOf(const rpc::ChunkReply &rep) {
  ExtentList extents = FromWire(rep.extents());
  if (!env_->pool->Covers(extents)) {
    LOG_ERROR("inode %" PRIu64 ": the server sent extents outside the pool", rep.attr().ino());
    map_ = ExtentMap();
    return -EIO;
  }
  map_ = ExtentMap(std::move(extents));
  return 0;
}

// --- Readers --------------------------------------------------------------------

int OpenFile::OpenSealed(const rpc::Caller &caller) {
  rpc::RefRequest r;
  r.mutable_ref()->set_ino(ino_);
  rpc::ChunkReply rep;
  int rc = env_->client->Call(&Stub::Open, r, &rep, &caller);
  if (rc < 0) return rc;
  gen_ = rep.attr().gen();
  size_ = rep.attr().size();
  attr_ = rep.attr();
  lease_ = env_->client->TrackLease(rep.lease(), ino_, gen_);
  watch_ = env_->client->WatchLease(lease_);  // right after the answer that granted it
  if (int rc = MapOf(rep); rc < 0) return rc;
  // Lines of these extents this CPU holds from before (an older file
  // there, a prefetch) are stale where the pool is not coherent.
  if (env_->pool->flush()) EachPoolRange(InvalidateRange);
  return 0;
}

void OpenFile::EachPoolRange(void (*op)(const void *, size_t)) {
  map_.ForEachPiece(0, size_, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t) {
    op(env_->pool->device(dev)->base() + at, n);
  });
}

int OpenFile::Read(uint64_t start, uint64_t size, ReadView *view, bool may_wait) {
  if (follows_) return follows_->Read(start, size, view, may_wait);
  // A writer's bytes may change: they are replied while its lock is held.
  if (writer()) {
    if (may_wait)
      mu_.Lock();
    else if (!mu_.TryLock())
      return -EWOULDBLOCK;
    view->locked = &mu_;
  }
  const uint64_t len = start < size_ ? std::min(size, size_ - start) : 0;
  // The watch answers from atomics; once it cannot vouch (the server was
  // silent, or a resume renewed the lease), the lease table decides.
  if (len && !writer() && !env_->client->LeaseHeld(watch_) && !env_->client->LeaseValid(lease_))
    return -EIO;
  view->map = &map_;
  view->len = len;
  view->sealed = !writer();
  return 0;
}

bool OpenFile::LastAttr(rpc::Attr *attr) {
  if (follows_) return follows_->LastAttr(attr);
  MutexLock lock(&mu_);
  if (attr_.ino() == 0) return false;
  *attr = noted_.mode() ? noted_ : attr_;
  if (!attr->mode()) attr->set_mode(S_IFREG);
  attr->set_ino(ino_);
  attr->set_gen(gen_);
  attr->set_state(attr_.state());
  attr->set_size(size_);
  attr->set_allocated(map_.length());
  return true;
}

void OpenFile::NoteAttr(const rpc::Attr &attr) {
  if (follows_) return follows_->NoteAttr(attr);
  MutexLock lock(&mu_);
  noted_ = attr;
}

// --- Writers --------------------------------------------------------------------

int OpenFile::AdoptCreated(const rpc::ChunkReply &created, const rpc::Caller &caller) {
  gen_ = created.attr().gen();
  attr_ = created.attr();
  caller_ = caller;
  return MapOf(created);
}

int OpenFile::StartVersion(const rpc::Caller &caller, uint64_t keep) {
  MutexLock lock(&mu_);
  return NewVersion(caller, keep);
}

int OpenFile::NewVersion(const rpc::Caller &caller, uint64_t keep) {
  std::shared_ptr<OpenFile> old;  // the current content, if any of it is kept
  const bool moved = keep > 0 && sealed_ && map_.length();
  if (moved) {
    old = MovePublished();
  } else if (keep > 0) {
    if (int rc = OpenCurrent(&old); rc < 0) return rc;
  }
  const uint64_t kept = old ? std::min(keep, old->size_) : 0;
  rpc::ChunkReply rep;
  int rc = CreateVersion(caller, kept, &rep);
  // The file is gone (unlinked since it was sealed): this writer goes on
  // in a version of its own, under no name.
  const bool gone = (rc == -ESTALE || rc == -ENOENT) && sealed_;
  if (gone) rc = AllocVersion(caller, kept, &rep);
  if (rc < 0) {
    if (moved) std::swap(lease_, old->lease_);  // still the sealed version: read on under it
    return rc;
  }
  detached_ = gone;
  ReleaseLease();  // the sealed version nothing is kept of
  gen_ = rep.attr().gen();
  attr_ = rep.attr();
  size_ = 0;
  sealed_ = false;  // so that a failure from here on aborts the new version
  dirty_ = true;
  caller_ = caller;
  if (int rc = MapOf(rep); rc < 0) return rc;
  if (old) CopyFrom(*old, kept);
  return 0;
}

int OpenFile::CreateVersion(const rpc::Caller &caller, uint64_t size, rpc::ChunkReply *rep) {
  rpc::CreateRequest r;
  r.mutable_ref()->set_ino(ino_);
  r.set_truncate(true);
  r.set_size(size);
  return env_->client->Call(&Stub::Create, r, rep, &caller);
}

int OpenFile::AllocVersion(const rpc::Caller &caller, uint64_t size, rpc::ChunkReply *rep) {
  rpc::AllocRequest r;
  r.set_size(std::max<uint64_t>(size, 1));
  // Charged to the caller (asserted), as a create in its name would be.
  int rc = env_->client->Call(&Stub::Alloc, r, rep, &caller);
  if (rc == 0) rep->mutable_attr()->set_ino(ino_);  // an allocation names no file
  return rc;
}

int OpenFile::GrowDetached(const rpc::Caller &caller, uint64_t end) {
  rpc::ChunkReply rep;
  int rc =
      Grow(map_.length(), end, [&](uint64_t size) { return AllocVersion(caller, size, &rep); });
  if (rc < 0) return rc;
  OpenFile old(env_, ino_, Role::kReader);  // the bytes so far, given back after the copy
  old.map_ = std::move(map_);
  old.size_ = size_;
  const uint64_t old_gen = gen_;
  gen_ = rep.attr().gen();
  if (int err = MapOf(rep); err < 0) return err;
  CopyFrom(old, old.size_);
  rpc::HandleRequest abort;  // an allocation under no name: only aborting frees it
  abort.set_gen(old_gen);
  rpc::ErrorReply ignored;
  env_->client->Call(&Stub::Abort, abort, &ignored, &caller_);
  return 0;
}

std::shared_ptr<OpenFile> OpenFile::MovePublished() {
  auto old = std::make_shared<OpenFile>(env_, ino_, Role::kReader);
  old->map_ = map_;
  old->size_ = size_;
  old->lease_ = lease_;  // released with `old`, or moved back
  lease_ = 0;
  return old;
}

int OpenFile::OpenCurrent(std::shared_ptr<OpenFile> *old) {
  auto current = std::make_shared<OpenFile>(env_, ino_, Role::kReader);
  // Read by the mount itself, not by the caller: writing needs write
  // permission only (the server checks it at the create that follows, and
  // nothing is copied unless that succeeds), as on a local filesystem.
  int rc = current->OpenSealed(rpc::Caller());
  if (rc == -ENOENT) return 0;  // no sealed version: nothing to keep
  if (rc < 0) return rc;
  *old = std::move(current);
  return 0;
}

void OpenFile::CopyFrom(const OpenFile &old, uint64_t len) {
  size_ = len;
  const PoolMap &pool = *env_->pool;
  old.map_.ForEachPiece(0, len, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t file_off) {
    const uint8_t *src = pool.device(dev)->base() + at;
    map_.ForEachPiece(file_off, n, [&](uint32_t d2, uint64_t at2, uint64_t n2, uint64_t off2) {
      memcpy(pool.device(d2)->base() + at2, src + (off2 - file_off), n2);
    });
  });
}

void OpenFile::Zero(uint64_t off, uint64_t len) {
  // Fresh extents hold whatever a freed chunk left: never show it.
  map_.ForEachPiece(off, len, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t) {
    memset(env_->pool->device(dev)->base() + at, 0, n);
  });
}

int OpenFile::Reserve(const CallerFn &caller, uint64_t end) {
  if (end <= map_.length()) return 0;
  if (detached_) return GrowDetached(caller(), end);
  rpc::ExtendRequest r;
  r.set_ino(ino_);
  r.set_gen(gen_);
  rpc::ChunkReply rep;
  const rpc::Caller who = caller();
  int rc = Grow(map_.length(), end, [&](uint64_t size) {
    r.set_size(size);
    return env_->client->Call(&Stub::Extend, r, &rep, &who);
  });
  if (rc == -ENOENT) {  // removed while written: on under no name
    detached_ = true;
    return GrowDetached(who, end);
  }
  if (rc < 0) return rc;
  return MapOf(rep);
}

ssize_t OpenFile::Write(const CallerFn &caller, uint64_t start, uint64_t len, const CopyIn &copy,
                        bool may_wait) {
  if (!writer()) return -EBADF;
  if (may_wait)
    mu_.Lock();
  else if (!mu_.TryLock())
    return -EWOULDBLOCK;
  const ssize_t copied = WriteLocked(caller, start, len, copy, may_wait);
  mu_.Unlock();
  return copied;
}

ssize_t OpenFile::WriteLocked(const CallerFn &caller, uint64_t start, uint64_t len,
                              const CopyIn &copy, bool may_wait) {
  if (!may_wait && (NeedsVersion() || start + len > map_.length())) return -EWOULDBLOCK;
  int rc = NeedsVersion() ? NewVersion(caller(), UINT64_MAX) : 0;  // written again after a seal
  if (rc == 0) rc = Reserve(caller, start + len);
  if (rc < 0) return rc;
  if (start > size_) Zero(size_, start - size_);  // a hole reads as zeros
  ssize_t copied = copy(map_);
  if (copied < 0) return copied;
  size_ = std::max(size_, start + static_cast<uint64_t>(copied));
  dirty_ = true;
  return copied;
}

int OpenFile::Truncate(const CallerFn &caller, uint64_t size) {
  MutexLock lock(&mu_);
  int rc = NeedsVersion() ? NewVersion(caller(), size) : 0;
  if (rc == 0) rc = Reserve(caller, size);
  if (rc < 0) return rc;
  if (size > size_) Zero(size_, size - size_);
  size_ = size;
  dirty_ = true;
  return 0;
}

int OpenFile::Publish() {
  if (!writer()) return 0;
  MutexLock lock(&mu_);
  // A file that is gone has no name to publish under: its bytes stay this
  // writer's until the last close.
  if (detached_) return 0;
  return PublishedLocked() ? 0 : Seal();
}

bool OpenFile::Published() {
  MutexLock lock(&mu_);
  return PublishedLocked();
}

int OpenFile::Seal() {
  rpc::SealRequest r;
  r.set_ino(ino_);
  r.set_gen(gen_);
  r.set_size(size_);
  r.set_keep_lease(true);
  r.set_keep_if_removed(true);
  if (env_->checksum != ChecksumKind::kNone) {
    // Checksummed where it lies, piece by piece if it is fragmented.
    ChecksumStream sum(env_->checksum);
    map_.ForEachPiece(0, size_, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t) {
      sum.Update(env_->pool->device(dev)->base() + at, n);
    });
    r.set_checksum_type(ToWire(env_->checksum));
    r.set_checksum(sum.Digest());
  }
  // Readers on other hosts read memory, not this CPU's caches.
  if (env_->pool->flush()) EachPoolRange(FlushRange);
  rpc::ChunkReply rep;
  int rc = env_->client->Call(&Stub::Seal, r, &rep, &caller_);
  if (rc == -ENOENT) {  // removed while written: kept, the writer's alone
    detached_ = true;
    return 0;
  }
  if (rc < 0) return rc;
  sealed_ = true;
  dirty_ = false;
  lease_ = env_->client->TrackLease(rep.lease(), ino_, gen_);
  if (env_->published) env_->published(ino_, gen_);
  return 0;
}

bool OpenFile::WrittenSize(uint64_t server_gen, uint64_t *size, uint64_t *allocated) {
  MutexLock lock(&mu_);
  if (PublishedLocked() && server_gen != gen_) return false;
  *size = size_;
  *allocated = map_.length();
  return true;
}

}  // namespace maru
