#include "fs/maru_fs.h"

#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <vector>

#include "util/log.h"

namespace maru {
namespace {

using Stub = rpc::Meta::Stub;
constexpr uint64_t kMinGrowth = 1 << 20;  // a writer's reservation grows by at least this
constexpr uint32_t kReaddirPage = 4096;
constexpr const char *kXattrPrefix = "user.maru.";
constexpr const char *kXattrNames[] = {"extents", "generation", "state",    "leases",
                                       "pinned",  "hits",       "checksum", "parent"};

MaruFs *Fs(fuse_req_t req) {
  return static_cast<MaruFs *>(fuse_req_userdata(req));
}

std::shared_ptr<OpenFile> &Handle(fuse_file_info *fi) {
  return *reinterpret_cast<std::shared_ptr<OpenFile> *>(fi->fh);
}

// The identity of the process behind a request: the server checks it.
rpc::Caller CallerOf(fuse_req_t req) {
  const fuse_ctx *ctx = fuse_req_ctx(req);
  rpc::Caller c;
  c.set_set(true);
  c.set_uid(ctx->uid);
  c.set_gid(ctx->gid);
  c.set_pid(static_cast<uint32_t>(ctx->pid));
  gid_t groups[64];
  int n = fuse_req_getgroups(req, 64, groups);
  for (int i = 0; i < n && i < 64; ++i) c.add_groups(groups[i]);
  return c;
}

// Transport trouble becomes EIO for the filesystem, after the bounded wait.
int FsErrno(int rc) {
  if (rc == -ENOTCONN || rc == -ETIMEDOUT || rc == -ECANCELED) return EIO;
  return -rc;
}

// A FUSE buffer vector over the pool behind [start, start+len) of a file,
// one buffer per extent piece: the pool memory, or (`as_fd`, for replies
// where the device is a file) the device file itself, so that the kernel
// can splice the bytes instead of the daemon copying them.
class PoolBufvec {
 public:
  PoolBufvec(const PoolMap &pool, const ExtentMap &map, uint64_t start, uint64_t len,
             bool as_fd = false) {
    size_t pieces = 0;
    map.ForEachPiece(start, len, [&](uint32_t, uint64_t, uint64_t, uint64_t) { ++pieces; });
    storage_.resize(sizeof(fuse_bufvec) + pieces * sizeof(fuse_buf));
    fuse_bufvec *v = get();
    v->count = v->idx = v->off = 0;
    map.ForEachPiece(start, len, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t) {
      fuse_buf &b = v->buf[v->count++];
      b = fuse_buf{};
      b.size = n;
      const PoolDevice *d = pool.device(dev);
      if (as_fd && !d->is_devdax()) {
        b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
        b.fd = d->fd();
        b.pos = static_cast<off_t>(at);
      } else {
        b.mem = d->base() + at;
      }
    });
  }
  fuse_bufvec *get() { return reinterpret_cast<fuse_bufvec *>(storage_.data()); }

 private:
  std::vector<uint8_t> storage_;
};

struct DirHandle {
  std::vector<rpc::DirEntry> entries;
  rpc::Attr self, parent;
};

rpc::Ref RefTo(fuse_ino_t ino, const char *name = nullptr) {
  rpc::Ref r;
  r.set_ino(ino);
  if (name) r.set_name(name);
  return r;
}

}  // namespace

MaruFs::MaruFs(std::unique_ptr<MetaClient> client, std::unique_ptr<PoolMap> pool, FsOptions options)
    : client_(std::move(client)), pool_(std::move(pool)), options_(options) {}

template <typename Req, typename Rep>
int MaruFs::Call(fuse_req_t req, MetaClient::Method<Req, Rep> method, Req &r, Rep *rep) {
  rpc::Caller caller = CallerOf(req);
  return client_->Call(method, r, rep, &caller);
}

// --- Attributes -----------------------------------------------------------------

std::shared_ptr<OpenFile> MaruFs::Writer(uint64_t ino) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = writers_.find(ino);
  return it == writers_.end() ? nullptr : it->second;
}

void MaruFs::ToStat(const rpc::Attr &a, struct stat *st) {
  memset(st, 0, sizeof(*st));
  st->st_ino = a.ino();
  st->st_mode = a.mode();
  st->st_nlink = a.nlink();
  st->st_uid = a.uid();
  st->st_gid = a.gid();
  st->st_size = static_cast<off_t>(a.size());
  st->st_blocks = static_cast<blkcnt_t>((a.allocated() + 511) / 512);
  st->st_blksize = 1 << 20;
  st->st_atim = {a.atime_ns() / 1000000000, a.atime_ns() % 1000000000};
  st->st_mtim = {a.mtime_ns() / 1000000000, a.mtime_ns() % 1000000000};
  st->st_ctim = {a.ctime_ns() / 1000000000, a.ctime_ns() % 1000000000};
  // A file this mount is writing: its size is what the writer wrote, unless
  // what it wrote is sealed and someone has published a newer version.
  if (a.state() != rpc::DIRECTORY) {
    if (std::shared_ptr<OpenFile> w = Writer(a.ino())) {
      std::lock_guard<std::mutex> lock(w->mu);
      if (w->sealed && !w->dirty && a.gen() != w->gen) return;
      st->st_size = static_cast<off_t>(w->size);
      st->st_blocks = static_cast<blkcnt_t>((w->map.length() + 511) / 512);
    }
  }
}

double MaruFs::AttrTimeout(const rpc::Attr &a) const {
  // Sealed files and directories may be cached; a file being written changes.
  return a.state() == rpc::WRITING ? 0 : options_.attr_timeout;
}

void MaruFs::ReplyEntry(fuse_req_t req, const rpc::Attr &a) {
  fuse_entry_param e{};
  e.ino = a.ino();
  e.generation = 1;  // inode numbers are never reused
  ToStat(a, &e.attr);
  e.attr_timeout = AttrTimeout(a);
  e.entry_timeout = options_.entry_timeout;
  fuse_reply_entry(req, &e);
}

void MaruFs::Init(fuse_conn_info *conn) {
  // Opening with O_TRUNC is one request: a new version, atomically.
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  if (conn->capable & FUSE_CAP_SPLICE_READ) conn->want |= FUSE_CAP_SPLICE_READ;
  if (options_.splice && (conn->capable & FUSE_CAP_SPLICE_WRITE))
    conn->want |= FUSE_CAP_SPLICE_WRITE | (conn->capable & FUSE_CAP_SPLICE_MOVE);
  else
    options_.splice = false;
  // No byte-range locks: they would only be local to this mount.
  conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
  conn->max_readahead = 1 << 20;
  conn->max_write = 1 << 20;
}

void MaruFs::Lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  rpc::RefRequest r;
  *r.mutable_ref() = RefTo(parent, name);
  rpc::AttrReply rep;
  int rc = Call(req, &Stub::GetAttr, r, &rep);
  if (rc == -ENOENT) {
    fuse_entry_param e{};  // ino 0, timeout 0: a miss that is not cached
    fuse_reply_entry(req, &e);
    return;
  }
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  ReplyEntry(req, rep.attr());
}

void MaruFs::GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info *) {
  rpc::RefRequest r;
  *r.mutable_ref() = RefTo(ino);
  rpc::AttrReply rep;
  int rc = Call(req, &Stub::GetAttr, r, &rep);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  struct stat st;
  ToStat(rep.attr(), &st);
  fuse_reply_attr(req, &st, AttrTimeout(rep.attr()));
}

void MaruFs::SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                     fuse_file_info *fi) {
  if (to_set & FUSE_SET_ATTR_SIZE) {
    // A size change is a write: through the open writer, or a new version.
    std::shared_ptr<OpenFile> f = fi ? Handle(fi) : Writer(ino);
    if (!fi && f) {
      // truncate(path) through another process's open writer: the caller
      // must be allowed to write the file itself.
      rpc::RefRequest check;
      *check.mutable_ref() = RefTo(ino);
      check.set_access(W_OK);
      rpc::AttrReply checked;
      if (int rc = Call(req, &Stub::GetAttr, check, &checked); rc < 0)
        return (void)fuse_reply_err(req, FsErrno(rc));
    }
    std::shared_ptr<OpenFile> temp;
    if (!f || !f->writer) {
      temp = NewOpenFile();
      temp->ino = ino;
      temp->writer = true;
      f = temp;
    }
    std::lock_guard<std::mutex> lock(f->mu);
    const uint64_t size = static_cast<uint64_t>(attr->st_size);
    int rc = 0;
    if (temp || f->sealed) rc = StartVersion(req, f.get(), size);
    if (rc == 0) rc = EnsureReserved(req, f.get(), size);
    if (rc == 0) {
      if (size > f->size) ZeroRange(f.get(), f->size, size - f->size);
      f->size = size;
      f->dirty = true;
      if (temp) rc = SealFile(f.get());
    }
    if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  }
  rpc::SetAttrRequest r;
  *r.mutable_ref() = RefTo(ino);
  if (to_set & FUSE_SET_ATTR_MODE) r.set_set_mode(true), r.set_mode(attr->st_mode & 07777);
  if (to_set & FUSE_SET_ATTR_UID) r.set_set_uid(true), r.set_uid(attr->st_uid);
  if (to_set & FUSE_SET_ATTR_GID) r.set_set_gid(true), r.set_gid(attr->st_gid);
  if (to_set & FUSE_SET_ATTR_ATIME_NOW)
    r.set_set_atime(true), r.set_atime_ns(-1);
  else if (to_set & FUSE_SET_ATTR_ATIME)
    r.set_set_atime(true),
        r.set_atime_ns(attr->st_atim.tv_sec * 1000000000 + attr->st_atim.tv_nsec);
  if (to_set & FUSE_SET_ATTR_MTIME_NOW)
    r.set_set_mtime(true), r.set_mtime_ns(-1);
  else if (to_set & FUSE_SET_ATTR_MTIME)
    r.set_set_mtime(true),
        r.set_mtime_ns(attr->st_mtim.tv_sec * 1000000000 + attr->st_mtim.tv_nsec);
  rpc::AttrReply rep;
  int rc = Call(req, &Stub::SetAttr, r, &rep);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  struct stat st;
  ToStat(rep.attr(), &st);
  fuse_reply_attr(req, &st, AttrTimeout(rep.attr()));
}

// --- Namespace ------------------------------------------------------------------

void MaruFs::Mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t) {
  if (!S_ISREG(mode)) return (void)fuse_reply_err(req, EPERM);  // no devices, FIFOs, sockets
  rpc::CreateRequest r;
  *r.mutable_ref() = RefTo(parent, name);
  r.set_mode(mode & 07777);
  rpc::ChunkReply created;
  int rc = Call(req, &Stub::Create, r, &created);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  rpc::SealRequest seal;  // an empty file, published at once
  seal.set_ino(created.attr().ino());
  seal.set_gen(created.attr().gen());
  rpc::ChunkReply sealed;
  rc = Call(req, &Stub::Seal, seal, &sealed);
  if (rc < 0) {
    rpc::HandleRequest abort;  // leave no unfinished file behind
    abort.set_ino(seal.ino());
    abort.set_gen(seal.gen());
    rpc::ErrorReply ignored;
    Call(req, &Stub::Abort, abort, &ignored);
    return (void)fuse_reply_err(req, FsErrno(rc));
  }
  rpc::RefRequest a;
  *a.mutable_ref() = RefTo(created.attr().ino());
  rpc::AttrReply attr;
  rc = Call(req, &Stub::GetAttr, a, &attr);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  ReplyEntry(req, attr.attr());
}

void MaruFs::Mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
  rpc::MkdirRequest r;
  *r.mutable_ref() = RefTo(parent, name);
  r.set_mode(mode & 07777);
  rpc::AttrReply rep;
  int rc = Call(req, &Stub::Mkdir, r, &rep);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  ReplyEntry(req, rep.attr());
}

void MaruFs::Unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
  rpc::RefRequest r;
  *r.mutable_ref() = RefTo(parent, name);
  rpc::ErrorReply rep;
  fuse_reply_err(req, FsErrno(Call(req, &Stub::Unlink, r, &rep)));
}

void MaruFs::Rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
  rpc::RefRequest r;
  *r.mutable_ref() = RefTo(parent, name);
  rpc::ErrorReply rep;
  fuse_reply_err(req, FsErrno(Call(req, &Stub::Rmdir, r, &rep)));
}

void MaruFs::Rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                    const char *newname, unsigned int flags) {
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) return (void)fuse_reply_err(req, EINVAL);
  rpc::RenameRequest r;
  *r.mutable_from() = RefTo(parent, name);
  *r.mutable_to() = RefTo(newparent, newname);
  r.set_noreplace(flags & RENAME_NOREPLACE);
  r.set_exchange(flags & RENAME_EXCHANGE);
  rpc::ErrorReply rep;
  fuse_reply_err(req, FsErrno(Call(req, &Stub::Rename, r, &rep)));
}

// --- Files ----------------------------------------------------------------------

void MaruFs::ZeroRange(OpenFile *f, uint64_t off, uint64_t len) {
  // Fresh extents hold whatever a freed chunk left: never show it.
  f->map.ForEachPiece(off, len, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t) {
    memset(pool_->device(dev)->base() + at, 0, n);
  });
}

int MaruFs::StartVersion(fuse_req_t req, OpenFile *f, uint64_t keep) {
  // The current content, if any part of it is kept.
  std::shared_ptr<OpenFile> old;
  const bool moved = keep > 0 && f->writer && f->sealed && f->map.length();
  if (keep > 0) {
    if (moved) {
      old = NewOpenFile();
      old->map = f->map;
      old->size = f->size;
      old->lease = f->lease;  // moved: released with `old`, or moved back
      f->lease = 0;
    } else {
      rpc::RefRequest r;
      *r.mutable_ref() = RefTo(f->ino);
      rpc::ChunkReply rep;
      int rc = Call(req, &Stub::Open, r, &rep);
      if (rc < 0 && rc != -ENOENT) return rc;
      if (rc == 0) {
        old = NewOpenFile();
        old->lease = client_->TrackLease(rep.lease(), f->ino, rep.attr().gen());
        old->size = rep.attr().size();
        if (rc = MapOf(rep, &old->map); rc < 0) return rc;
      }
    }
  }
  rpc::CreateRequest r;
  *r.mutable_ref() = RefTo(f->ino);
  r.set_truncate(true);
  r.set_size(old ? std::min(keep, old->size) : 0);
  rpc::ChunkReply rep;
  int rc = Call(req, &Stub::Create, r, &rep);
  if (rc < 0) {
    // Still the sealed version: keep reading it under its lease.
    if (moved) std::swap(f->lease, old->lease);
    return rc;
  }
  if (f->lease) {  // the sealed version nothing is kept of
    client_->ReleaseLease(f->lease);
    f->lease = 0;
  }
  f->gen = rep.attr().gen();
  f->size = 0;
  f->sealed = false;  // so a failure below aborts the new version
  f->dirty = true;
  f->caller = CallerOf(req);
  if (rc = MapOf(rep, &f->map); rc < 0) return rc;
  if (!old) return 0;
  f->size = std::min(keep, old->size);
  old->map.ForEachPiece(0, f->size, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t file_off) {
    const uint8_t *src = pool_->device(dev)->base() + at;
    f->map.ForEachPiece(file_off, n, [&](uint32_t d2, uint64_t at2, uint64_t n2, uint64_t off2) {
      memcpy(pool_->device(d2)->base() + at2, src + (off2 - file_off), n2);
    });
  });
  return 0;
}

int MaruFs::EnsureReserved(fuse_req_t req, OpenFile *f, uint64_t end) {
  if (end <= f->map.length()) return 0;
  // Grow geometrically: a file written in small pieces costs few RPCs.
  uint64_t want = std::max({end, f->map.length() * 2, kMinGrowth});
  rpc::ExtendRequest r;
  r.set_ino(f->ino);
  r.set_gen(f->gen);
  r.set_size(want);
  rpc::ChunkReply rep;
  int rc = Call(req, &Stub::Extend, r, &rep);
  if (rc == -ENOSPC && want > end) {  // all that is left may still do
    r.set_size(end);
    rc = Call(req, &Stub::Extend, r, &rep);
  }
  if (rc < 0) return rc;
  return MapOf(rep, &f->map);
}

int MaruFs::SealFile(OpenFile *f) {
  rpc::SealRequest r;
  r.set_ino(f->ino);
  r.set_gen(f->gen);
  r.set_size(f->size);
  r.set_keep_lease(true);
  if (options_.checksum != ChecksumKind::kNone) {
    // Checksummed where it lies, piece by piece if it is fragmented.
    ChecksumStream sum(options_.checksum);
    f->map.ForEachPiece(0, f->size, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t) {
      sum.Update(pool_->device(dev)->base() + at, n);
    });
    r.set_checksum_type(ToWire(options_.checksum));
    r.set_checksum(sum.Digest());
  }
  rpc::ChunkReply rep;
  int rc = client_->Call(&Stub::Seal, r, &rep, &f->caller);
  if (rc < 0) return rc;
  f->sealed = true;
  f->dirty = false;
  f->lease = client_->TrackLease(rep.lease(), f->ino, f->gen);
  // Written through the page cache, the kernel's pages are this version.
  std::lock_guard<std::mutex> lock(mu_);
  cached_gen_[f->ino] = DirectWrites() ? 0 : f->gen;
  return 0;
}

int MaruFs::MapOf(const rpc::ChunkReply &rep, ExtentMap *map) {
  ExtentList extents = FromWire(rep.extents());
  if (!pool_->Covers(extents)) {
    LOG_ERROR("inode %" PRIu64 ": the server sent extents outside the pool", rep.attr().ino());
    *map = ExtentMap();
    return -EIO;
  }
  *map = ExtentMap(std::move(extents));
  return 0;
}

std::shared_ptr<OpenFile> MaruFs::NewOpenFile() {
  // Whoever lets go of the file last (its handle, a reader following a
  // writer, a temporary) gives back what it holds: a follower reads the
  // writer's extents, so they stay reserved or leased until it closes too.
  return std::shared_ptr<OpenFile>(new OpenFile(), [this](OpenFile *f) {
    DropFile(f);
    delete f;
  });
}

void MaruFs::DropFile(OpenFile *f) {
  if (f->writer && !f->sealed && f->gen) {
    rpc::HandleRequest r;
    r.set_ino(f->ino);
    r.set_gen(f->gen);
    rpc::ErrorReply rep;
    client_->Call(&Stub::Abort, r, &rep, &f->caller);
  }
  if (f->lease) client_->ReleaseLease(f->lease);
  f->lease = 0;
}

void MaruFs::Create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                    fuse_file_info *fi) {
  if (!S_ISREG(mode)) return (void)fuse_reply_err(req, EPERM);
  rpc::CreateRequest r;
  *r.mutable_ref() = RefTo(parent, name);
  r.set_mode(mode & 07777);
  rpc::ChunkReply rep;
  int rc = Call(req, &Stub::Create, r, &rep);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  auto f = NewOpenFile();
  f->ino = rep.attr().ino();
  f->writer = true;
  f->gen = rep.attr().gen();
  f->caller = CallerOf(req);
  if (rc = MapOf(rep, &f->map); rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  {
    std::lock_guard<std::mutex> lock(mu_);
    writers_[f->ino] = f;
  }
  fi->fh = reinterpret_cast<uint64_t>(new std::shared_ptr<OpenFile>(f));
  fi->keep_cache = 0;
  fi->direct_io = DirectWrites();
  fuse_entry_param e{};
  e.ino = f->ino;
  e.generation = 1;
  ToStat(rep.attr(), &e.attr);
  e.attr.st_size = 0;
  e.attr_timeout = 0;
  e.entry_timeout = options_.entry_timeout;
  fuse_reply_create(req, &e, fi);
}

void MaruFs::Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) {
  const int mode = fi->flags & O_ACCMODE;
  auto f = NewOpenFile();
  f->ino = ino;
  if (mode == O_RDONLY && !(fi->flags & O_TRUNC)) {
    // A file this mount is still writing is read from its writer; once the
    // writer's close sealed it, from the server like any other.
    std::shared_ptr<OpenFile> w = Writer(ino);
    bool published = false;
    if (w) {
      std::lock_guard<std::mutex> wlock(w->mu);
      published = w->sealed && !w->dirty;
    }
    // Not under its lock: this may be the last reference to the writer.
    if (published) w.reset();
    if (w) {
      f->follows = w;
      // The kernel's pages are the writer's, unless its writes bypass them.
      fi->keep_cache = !DirectWrites();
      fi->direct_io = DirectWrites();
      fi->fh = reinterpret_cast<uint64_t>(new std::shared_ptr<OpenFile>(f));
      return (void)fuse_reply_open(req, fi);
    }
    rpc::RefRequest r;
    *r.mutable_ref() = RefTo(ino);
    rpc::ChunkReply rep;
    int rc = Call(req, &Stub::Open, r, &rep);
    if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
    f->gen = rep.attr().gen();
    f->size = rep.attr().size();
    f->lease = client_->TrackLease(rep.lease(), ino, f->gen);
    if (rc = MapOf(rep, &f->map); rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
    // The page cache is valid as long as it holds this very version.
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t &cached = cached_gen_[ino];
    fi->keep_cache = cached == f->gen;
    fi->direct_io = options_.direct_io;
    cached = f->gen;
  } else {
    // Writing a sealed file writes a new version of it.
    f->writer = true;
    std::lock_guard<std::mutex> flock(f->mu);
    uint64_t keep = (fi->flags & O_TRUNC) ? 0 : UINT64_MAX;
    int rc = StartVersion(req, f.get(), keep);
    if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
    std::lock_guard<std::mutex> lock(mu_);
    writers_[ino] = f;
    fi->keep_cache = 0;
    fi->direct_io = DirectWrites();
  }
  fi->fh = reinterpret_cast<uint64_t>(new std::shared_ptr<OpenFile>(f));
  fuse_reply_open(req, fi);
}

void MaruFs::Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info *fi) {
  std::shared_ptr<OpenFile> f = Handle(fi);
  if (f->follows) f = f->follows;
  std::unique_lock<std::mutex> lock(f->mu, std::defer_lock);
  if (f->writer) lock.lock();
  const uint64_t start = static_cast<uint64_t>(off);
  if (start >= f->size) return (void)fuse_reply_buf(req, nullptr, 0);
  // A sealed version is read only under a lease known to hold: once the
  // server may have dropped it, its extents may hold another chunk.
  if (!f->writer && !client_->LeaseValid(f->lease)) return (void)fuse_reply_err(req, EIO);
  const uint64_t len = std::min<uint64_t>(size, f->size - start);
  // Sealed bytes never change: the kernel may splice them from the pool
  // file. A writer's bytes may, so they are copied while its lock is held.
  const bool splice = options_.splice && !f->writer;
  PoolBufvec data(*pool_, f->map, start, len, splice);
  fuse_reply_data(req, data.get(), splice ? FUSE_BUF_SPLICE_MOVE : FUSE_BUF_NO_SPLICE);
}

void MaruFs::WriteBuf(fuse_req_t req, fuse_ino_t, fuse_bufvec *in, off_t off, fuse_file_info *fi) {
  std::shared_ptr<OpenFile> f = Handle(fi);
  if (!f->writer) return (void)fuse_reply_err(req, EBADF);
  std::lock_guard<std::mutex> lock(f->mu);
  const uint64_t start = static_cast<uint64_t>(off), len = fuse_buf_size(in);
  int rc = 0;
  if (f->sealed) rc = StartVersion(req, f.get(), UINT64_MAX);  // written again after a close
  if (rc == 0) rc = EnsureReserved(req, f.get(), start + len);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  if (start > f->size) ZeroRange(f.get(), f->size, start - f->size);  // a hole reads as zeros
  PoolBufvec dst(*pool_, f->map, start, len);
  ssize_t copied = fuse_buf_copy(dst.get(), in, FUSE_BUF_NO_SPLICE);
  if (copied < 0) return (void)fuse_reply_err(req, static_cast<int>(-copied));
  f->size = std::max(f->size, start + static_cast<uint64_t>(copied));
  f->dirty = true;
  fuse_reply_write(req, static_cast<size_t>(copied));
}

void MaruFs::Flush(fuse_req_t req, fuse_ino_t, fuse_file_info *fi) {
  // close() of a writer publishes the file: readers can open it as soon as
  // close returns.
  std::shared_ptr<OpenFile> f = Handle(fi);
  if (!f->writer) return (void)fuse_reply_err(req, 0);
  std::lock_guard<std::mutex> lock(f->mu);
  int rc = f->sealed && !f->dirty ? 0 : SealFile(f.get());
  fuse_reply_err(req, rc < 0 ? FsErrno(rc) : 0);
}

void MaruFs::Release(fuse_req_t req, fuse_ino_t, fuse_file_info *fi) {
  auto *holder = reinterpret_cast<std::shared_ptr<OpenFile> *>(fi->fh);
  std::shared_ptr<OpenFile> f = *holder;
  delete holder;
  {
    std::lock_guard<std::mutex> lock(f->mu);
    if (f->writer && (!f->sealed || f->dirty)) {
      int rc = SealFile(f.get());
      if (rc < 0)
        LOG_WARN("sealing inode %" PRIu64 " at release: %s", f->ino, strerror(FsErrno(rc)));
    }
  }
  if (f->writer) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = writers_.find(f->ino);
    if (it != writers_.end() && it->second == f) writers_.erase(it);
  }
  fuse_reply_err(req, 0);
}

// --- Directories ----------------------------------------------------------------

void MaruFs::OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) {
  // A snapshot of the directory, read in pages: offsets stay stable while
  // the listing is read even if entries come and go.
  auto dir = std::make_unique<DirHandle>();
  rpc::ReaddirRequest r;
  *r.mutable_ref() = RefTo(ino);
  r.set_max(kReaddirPage);
  for (;;) {
    rpc::ReaddirReply rep;
    int rc = Call(req, &Stub::Readdir, r, &rep);
    if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
    dir->self = rep.dir();
    const int got = rep.entries_size();
    for (auto &e : *rep.mutable_entries()) dir->entries.push_back(std::move(e));
    if (rep.eof() || got == 0) break;  // an empty page ends it too: never loop
    r.set_after(dir->entries.back().name());
  }
  fi->fh = reinterpret_cast<uint64_t>(dir.release());
  fi->cache_readdir = 0;
  fuse_reply_open(req, fi);
}

void MaruFs::ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info *fi,
                     bool plus) {
  auto *dir = reinterpret_cast<DirHandle *>(fi->fh);
  std::vector<char> buf(size);
  size_t used = 0;
  // Offsets: 1 is ".", 2 is "..", 3 + i is entry i.
  for (size_t i = static_cast<size_t>(off); i < dir->entries.size() + 2; ++i) {
    std::string name;
    rpc::Attr attr;
    if (i == 0) {
      name = ".";
      attr = dir->self;
    } else if (i == 1) {
      name = "..";
      attr = dir->self;
      // Not 0: readdir(3) hides entries whose inode is 0.
      attr.set_ino(ino == FUSE_ROOT_ID || !dir->self.parent() ? ino : dir->self.parent());
    } else {
      name = dir->entries[i - 2].name();
      attr = dir->entries[i - 2].attr();
    }
    size_t n;
    if (plus && i >= 2) {
      fuse_entry_param e{};
      e.ino = attr.ino();
      e.generation = 1;
      ToStat(attr, &e.attr);
      e.attr_timeout = AttrTimeout(attr);
      e.entry_timeout = options_.entry_timeout;
      n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &e,
                                 static_cast<off_t>(i + 1));
    } else {
      struct stat st {};
      st.st_ino = attr.ino();
      st.st_mode = attr.mode();
      if (plus) {
        fuse_entry_param e{};  // "." and "..": no lookup count taken
        e.attr = st;
        n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &e,
                                   static_cast<off_t>(i + 1));
      } else {
        n = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st,
                              static_cast<off_t>(i + 1));
      }
    }
    if (n > size - used) break;
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void MaruFs::ReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info *fi) {
  delete reinterpret_cast<DirHandle *>(fi->fh);
  fuse_reply_err(req, 0);
}

void MaruFs::Statfs(fuse_req_t req, fuse_ino_t) {
  rpc::StatfsRequest r;
  rpc::StatfsReply rep;
  int rc = Call(req, &Stub::Statfs, r, &rep);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  struct statvfs st {};
  st.f_bsize = 1 << 20;
  st.f_frsize = 4096;
  st.f_blocks = rep.total() / st.f_frsize;
  st.f_bfree = rep.free() / st.f_frsize;
  st.f_bavail = st.f_bfree;
  st.f_files = rep.files() + (1ull << 32);
  st.f_ffree = 1ull << 32;
  st.f_favail = st.f_ffree;
  st.f_namemax = 255;
  fuse_reply_statfs(req, &st);
}

// --- Extended attributes: user.maru.* ------------------------------------------

void MaruFs::GetXattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
  std::string n = name;
  if (n.rfind(kXattrPrefix, 0) != 0) return (void)fuse_reply_err(req, ENODATA);
  n = n.substr(strlen(kXattrPrefix));
  rpc::RefRequest r;
  *r.mutable_ref() = RefTo(ino);
  r.set_with_extents(n == "extents" || n == "parent");
  rpc::AttrReply rep;
  int rc = Call(req, &Stub::GetAttr, r, &rep);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  const rpc::Attr &a = rep.attr();
  std::string value;
  char buf[128];
  if (n == "extents") {
    for (const auto &e : rep.extents()) {
      snprintf(buf, sizeof(buf), "%s%u:%" PRIu64 "+%" PRIu64, value.empty() ? "" : ",", e.device(),
               e.offset(), e.length());
      value += buf;
    }
  } else if (n == "generation") {
    value = std::to_string(a.gen());
  } else if (n == "state") {
    value = a.state() == rpc::SEALED    ? "sealed"
            : a.state() == rpc::WRITING ? "writing"
                                        : "directory";
  } else if (n == "leases") {
    value = std::to_string(a.leases());
  } else if (n == "pinned") {
    value = a.pinned() ? "1" : "0";
  } else if (n == "hits") {
    value = std::to_string(a.hits());
  } else if (n == "checksum") {
    if (a.checksum_type() == rpc::CHECKSUM_NONE) return (void)fuse_reply_err(req, ENODATA);
    snprintf(buf, sizeof(buf), "%s:%016" PRIx64, ChecksumName(FromWire(a.checksum_type())),
             a.checksum());
    value = buf;
  } else if (n == "parent") {
    if (rep.parent_path().empty()) return (void)fuse_reply_err(req, ENODATA);
    value = rep.parent_path();
  } else {
    return (void)fuse_reply_err(req, ENODATA);
  }
  if (size == 0) return (void)fuse_reply_xattr(req, value.size());
  if (size < value.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, value.data(), value.size());
}

void MaruFs::ListXattr(fuse_req_t req, fuse_ino_t, size_t size) {
  std::string list;
  for (const char *n : kXattrNames) {
    list += kXattrPrefix;
    list += n;
    list += '\0';
  }
  if (size == 0) return (void)fuse_reply_xattr(req, list.size());
  if (size < list.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, list.data(), list.size());
}

void MaruFs::SetXattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                      size_t size, int) {
  std::string n = name, v(value, size);
  while (!v.empty() && (v.back() == '\n' || v.back() == '\0')) v.pop_back();
  int rc;
  if (n == std::string(kXattrPrefix) + "pinned") {
    if (v != "0" && v != "1") return (void)fuse_reply_err(req, EINVAL);
    rpc::PinRequest r;
    *r.mutable_ref() = RefTo(ino);
    r.set_pin(v == "1");
    rpc::AttrReply rep;
    rc = Call(req, &Stub::Pin, r, &rep);
  } else if (n == std::string(kXattrPrefix) + "parent") {
    rpc::SetAttrRequest r;
    *r.mutable_ref() = RefTo(ino);
    r.set_set_parent(true);
    r.set_parent_path(v);
    rpc::AttrReply rep;
    rc = Call(req, &Stub::SetAttr, r, &rep);
  } else if (n.rfind(kXattrPrefix, 0) == 0) {
    return (void)fuse_reply_err(req, EPERM);  // the others are read-only
  } else {
    return (void)fuse_reply_err(req, ENOTSUP);
  }
  fuse_reply_err(req, FsErrno(rc));
}

void MaruFs::RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
  std::string n = name;
  if (n == std::string(kXattrPrefix) + "parent") return SetXattr(req, ino, name, "", 0, 0);
  if (n == std::string(kXattrPrefix) + "pinned") return SetXattr(req, ino, name, "0", 1, 0);
  fuse_reply_err(req, n.rfind(kXattrPrefix, 0) == 0 ? EPERM : ENOTSUP);
}

void MaruFs::Access(fuse_req_t req, fuse_ino_t ino, int mask) {
  rpc::RefRequest r;
  *r.mutable_ref() = RefTo(ino);
  r.set_access(static_cast<uint32_t>(mask & 7));
  rpc::AttrReply rep;
  fuse_reply_err(req, FsErrno(Call(req, &Stub::GetAttr, r, &rep)));
}

// --- The operation table --------------------------------------------------------

const fuse_lowlevel_ops *MaruFs::Operations() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.init = [](void *data, fuse_conn_info *conn) { static_cast<MaruFs *>(data)->Init(conn); };
    o.lookup = [](fuse_req_t r, fuse_ino_t p, const char *n) { Fs(r)->Lookup(r, p, n); };
    o.forget = [](fuse_req_t r, fuse_ino_t, uint64_t) { fuse_reply_none(r); };
    o.getattr = [](fuse_req_t r, fuse_ino_t i, fuse_file_info *fi) { Fs(r)->GetAttr(r, i, fi); };
    o.setattr = [](fuse_req_t r, fuse_ino_t i, struct stat *a, int s, fuse_file_info *fi) {
      Fs(r)->SetAttr(r, i, a, s, fi);
    };
    o.readlink = [](fuse_req_t r, fuse_ino_t) { fuse_reply_err(r, EINVAL); };
    o.mknod = [](fuse_req_t r, fuse_ino_t p, const char *n, mode_t m, dev_t d) {
      Fs(r)->Mknod(r, p, n, m, d);
    };
    o.mkdir = [](fuse_req_t r, fuse_ino_t p, const char *n, mode_t m) { Fs(r)->Mkdir(r, p, n, m); };
    o.unlink = [](fuse_req_t r, fuse_ino_t p, const char *n) { Fs(r)->Unlink(r, p, n); };
    o.rmdir = [](fuse_req_t r, fuse_ino_t p, const char *n) { Fs(r)->Rmdir(r, p, n); };
    // Symbolic and hard links have no place in a chunk store.
    o.symlink = [](fuse_req_t r, const char *, fuse_ino_t, const char *) {
      fuse_reply_err(r, EPERM);
    };
    o.link = [](fuse_req_t r, fuse_ino_t, fuse_ino_t, const char *) { fuse_reply_err(r, EPERM); };
    o.rename = [](fuse_req_t r, fuse_ino_t p, const char *n, fuse_ino_t np, const char *nn,
                  unsigned f) { Fs(r)->Rename(r, p, n, np, nn, f); };
    o.open = [](fuse_req_t r, fuse_ino_t i, fuse_file_info *fi) { Fs(r)->Open(r, i, fi); };
    o.read = [](fuse_req_t r, fuse_ino_t i, size_t s, off_t o, fuse_file_info *fi) {
      Fs(r)->Read(r, i, s, o, fi);
    };
    o.write_buf = [](fuse_req_t r, fuse_ino_t i, fuse_bufvec *b, off_t o, fuse_file_info *fi) {
      Fs(r)->WriteBuf(r, i, b, o, fi);
    };
    o.flush = [](fuse_req_t r, fuse_ino_t i, fuse_file_info *fi) { Fs(r)->Flush(r, i, fi); };
    o.release = [](fuse_req_t r, fuse_ino_t i, fuse_file_info *fi) { Fs(r)->Release(r, i, fi); };
    o.fsync = [](fuse_req_t r, fuse_ino_t, int, fuse_file_info *) { fuse_reply_err(r, 0); };
    o.opendir = [](fuse_req_t r, fuse_ino_t i, fuse_file_info *fi) { Fs(r)->OpenDir(r, i, fi); };
    o.readdir = [](fuse_req_t r, fuse_ino_t i, size_t s, off_t o, fuse_file_info *fi) {
      Fs(r)->ReadDir(r, i, s, o, fi, false);
    };
    o.readdirplus = [](fuse_req_t r, fuse_ino_t i, size_t s, off_t o, fuse_file_info *fi) {
      Fs(r)->ReadDir(r, i, s, o, fi, true);
    };
    o.releasedir = [](fuse_req_t r, fuse_ino_t i, fuse_file_info *fi) {
      Fs(r)->ReleaseDir(r, i, fi);
    };
    o.fsyncdir = [](fuse_req_t r, fuse_ino_t, int, fuse_file_info *) { fuse_reply_err(r, 0); };
    o.statfs = [](fuse_req_t r, fuse_ino_t i) { Fs(r)->Statfs(r, i); };
    o.setxattr = [](fuse_req_t r, fuse_ino_t i, const char *n, const char *v, size_t s, int f) {
      Fs(r)->SetXattr(r, i, n, v, s, f);
    };
    o.getxattr = [](fuse_req_t r, fuse_ino_t i, const char *n, size_t s) {
      Fs(r)->GetXattr(r, i, n, s);
    };
    o.listxattr = [](fuse_req_t r, fuse_ino_t i, size_t s) { Fs(r)->ListXattr(r, i, s); };
    o.removexattr = [](fuse_req_t r, fuse_ino_t i, const char *n) { Fs(r)->RemoveXattr(r, i, n); };
    o.access = [](fuse_req_t r, fuse_ino_t i, int m) { Fs(r)->Access(r, i, m); };
    o.create = [](fuse_req_t r, fuse_ino_t p, const char *n, mode_t m, fuse_file_info *fi) {
      Fs(r)->Create(r, p, n, m, fi);
    };
    return o;
  }();
  return &ops;
}

}  // namespace maru
