#include "fs/maru_fs.h"

#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <vector>

#include "fs/fuse_loop.h"
#include "fs/fuse_ring.h"
#include "fs/pool_bufvec.h"
#include "util/log.h"

namespace maru {
namespace {

using Stub = rpc::Meta::Stub;
constexpr uint32_t kReaddirPage = 4096;
// writev takes at most IOV_MAX (1024) buffers, the reply's header among
// them. (A 1 MiB read of a file in 4 KiB extents has 257 pieces at most.)
constexpr int kMaxReplyPieces = 1000;

MaruFs *Fs(fuse_req_t req) {
  return static_cast<MaruFs *>(fuse_req_userdata(req));
}

// An open file's handle is a reference to its OpenFile.
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

OpenFile::CallerFn CallerFnOf(fuse_req_t req) {
  return [req] { return CallerOf(req); };
}

// Transport trouble becomes EIO for the filesystem, after the bounded wait.
int FsErrno(int rc) {
  if (rc == -ENOTCONN || rc == -ETIMEDOUT || rc == -ECANCELED) return EIO;
  return -rc;
}

rpc::Ref RefTo(fuse_ino_t ino, const char *name = nullptr) {
  rpc::Ref r;
  r.set_ino(ino);
  if (name) r.set_name(name);
  return r;
}

// The fields of a SetAttr request other than the size.
rpc::SetAttrRequest SetAttrOf(fuse_ino_t ino, const struct stat &attr, int to_set) {
  rpc::SetAttrRequest r;
  *r.mutable_ref() = RefTo(ino);
  if (to_set & FUSE_SET_ATTR_MODE) r.set_set_mode(true), r.set_mode(attr.st_mode & 07777);
  if (to_set & FUSE_SET_ATTR_UID) r.set_set_uid(true), r.set_uid(attr.st_uid);
  if (to_set & FUSE_SET_ATTR_GID) r.set_set_gid(true), r.set_gid(attr.st_gid);
  if (to_set & FUSE_SET_ATTR_ATIME_NOW)
    r.set_set_atime(true), r.set_atime_ns(-1);
  else if (to_set & FUSE_SET_ATTR_ATIME)
    r.set_set_atime(true), r.set_atime_ns(attr.st_atim.tv_sec * 1000000000 + attr.st_atim.tv_nsec);
  if (to_set & FUSE_SET_ATTR_MTIME_NOW)
    r.set_set_mtime(true), r.set_mtime_ns(-1);
  else if (to_set & FUSE_SET_ATTR_MTIME)
    r.set_set_mtime(true), r.set_mtime_ns(attr.st_mtim.tv_sec * 1000000000 + attr.st_mtim.tv_nsec);
  return r;
}

void ReplyXattr(fuse_req_t req, const std::string &value, size_t size) {
  if (size == 0) return (void)fuse_reply_xattr(req, value.size());
  if (size < value.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, value.data(), value.size());
}

}  // namespace

MaruFs::MaruFs(std::unique_ptr<MetaClient> client, std::unique_ptr<PoolMap> pool, FsOptions options)
    : client_(std::move(client)),
      pool_(std::move(pool)),
      options_(options),
      env_{client_.get(), pool_.get(), options_.checksum,
           [this](uint64_t ino, uint64_t gen) { Published(ino, gen); }},
      xattrs_(client_.get()) {}

MaruFs::~MaruFs() {
  std::unordered_set<std::shared_ptr<OpenFile> *> left;
  {
    MutexLock lock(&mu_);
    left.swap(handles_);
  }
  if (!left.empty()) LOG_INFO("%zu files were still open", left.size());
  for (std::shared_ptr<OpenFile> *holder : left) delete holder;
}

void MaruFs::SetHandle(fuse_file_info *fi, const std::shared_ptr<OpenFile> &f) {
  auto *holder = new std::shared_ptr<OpenFile>(f);
  {
    MutexLock lock(&mu_);
    handles_.insert(holder);
  }
  fi->fh = reinterpret_cast<uint64_t>(holder);
}

std::shared_ptr<OpenFile> MaruFs::TakeHandle(fuse_file_info *fi) {
  auto *holder = reinterpret_cast<std::shared_ptr<OpenFile> *>(fi->fh);
  {
    MutexLock lock(&mu_);
    handles_.erase(holder);
  }
  std::shared_ptr<OpenFile> f = std::move(*holder);
  delete holder;
  return f;
}

template <typename Req, typename Rep>
int MaruFs::Call(fuse_req_t req, MetaClient::Method<Req, Rep> method, Req &r, Rep *rep) {
  rpc::Caller caller = CallerOf(req);
  return client_->Call(method, r, rep, &caller);
}

// --- Attributes -----------------------------------------------------------------

std::shared_ptr<OpenFile> MaruFs::Writer(uint64_t ino) {
  MutexLock lock(&mu_);
  auto it = writers_.find(ino);
  return it == writers_.end() ? nullptr : it->second;
}

void MaruFs::AddWriter(const std::shared_ptr<OpenFile> &f) {
  MutexLock lock(&mu_);
  writers_[f->ino()] = f;
}

void MaruFs::RemoveWriter(const std::shared_ptr<OpenFile> &f) {
  MutexLock lock(&mu_);
  auto it = writers_.find(f->ino());
  if (it != writers_.end() && it->second == f) writers_.erase(it);
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
  if (a.state() == rpc::DIRECTORY) return;
  for (const std::shared_ptr<OpenFile> &f : OpenFilesOf(a.ino())) f->NoteAttr(a);
  std::shared_ptr<OpenFile> w = Writer(a.ino());
  uint64_t size, allocated;
  if (w && w->WrittenSize(a.gen(), &size, &allocated)) {
    st->st_size = static_cast<off_t>(size);
    st->st_blocks = static_cast<blkcnt_t>((allocated + 511) / 512);
  }
}

double MaruFs::AttrTimeout(const rpc::Attr &a) const {
  // Sealed files and directories may be cached; a file being written changes.
  return a.state() == rpc::WRITING ? 0 : options_.attr_timeout;
}

fuse_entry_param MaruFs::EntryOf(const rpc::Attr &a) {
  fuse_entry_param e{};
  e.ino = a.ino();
  e.generation = 1;  // inode numbers are never reused
  ToStat(a, &e.attr);
  e.attr_timeout = AttrTimeout(a);
  e.entry_timeout = options_.entry_timeout;
  return e;
}

void MaruFs::ReplyEntry(fuse_req_t req, const rpc::Attr &a) {
  fuse_entry_param e = EntryOf(a);
  fuse_reply_entry(req, &e);
}

void MaruFs::Init(fuse_conn_info *conn) {
  // Opening with O_TRUNC is one request: a new version, atomically.
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  // Lookups and readdirs of one directory at once (libfuse 3.14 leaves this
  // and HANDLE_KILLPRIV out of its reply; AnswerInit puts them in).
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  // Requests are read with one read(), not spliced through a pipe and read
  // from it (libfuse's default when write_buf is set): two system calls per
  // request measured 15-25 % more daemon CPU per 4 KiB read, and writes were
  // no faster for it (docs/benchmarks.md).
  conn->want &= ~FUSE_CAP_SPLICE_READ;
  // The server drops set-id bits on a write, truncate or chown (it is the
  // authority for every door). Without this the kernel would send a chmod
  // for it, in the writer's name, which fails for anyone but the owner.
  if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV) conn->want |= FUSE_CAP_HANDLE_KILLPRIV;
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

void MaruFs::GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) {
  rpc::RefRequest r;
  *r.mutable_ref() = RefTo(ino);
  rpc::AttrReply rep;
  int rc = Call(req, &Stub::GetAttr, r, &rep);
  // fstat of an open file works for as long as it is open, as on any
  // filesystem: unlinked since (ESTALE), its handle knows what it holds.
  // Closed to the caller since (EACCES): only through the caller's own
  // handle (a read); fstat comes without one, and another process's open
  // file must not answer for this caller.
  std::shared_ptr<OpenFile> f;
  if (rc == -ESTALE) f = fi ? Handle(fi) : AnyOpen(ino);
  if (rc == -EACCES && fi) f = Handle(fi);
  if (f && f->LastAttr(rep.mutable_attr())) {
    if (rc == -ESTALE) rep.mutable_attr()->set_nlink(0);  // unlinked
    rc = 0;
  }
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  struct stat st;
  ToStat(rep.attr(), &st);
  fuse_reply_attr(req, &st, AttrTimeout(rep.attr()));
}

void MaruFs::SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                     fuse_file_info *fi) {
  if (to_set & FUSE_SET_ATTR_SIZE) {
    int rc = Resize(req, ino, static_cast<uint64_t>(attr->st_size), fi);
    if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  }
  rpc::SetAttrRequest r = SetAttrOf(ino, *attr, to_set);
  rpc::AttrReply rep;
  int rc = Call(req, &Stub::SetAttr, r, &rep);
  // ftruncate (or futimens) of a file unlinked while open: the size is the
  // open file's, and so is the answer, as fstat's.
  const bool owner = to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID);
  if (rc == -ESTALE && fi && !owner && Handle(fi)->LastAttr(rep.mutable_attr())) {
    rep.mutable_attr()->set_nlink(0);
    rc = 0;
  }
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  struct stat st;
  ToStat(rep.attr(), &st);
  fuse_reply_attr(req, &st, AttrTimeout(rep.attr()));
}

int MaruFs::Resize(fuse_req_t req, fuse_ino_t ino, uint64_t size, fuse_file_info *fi) {
  std::shared_ptr<OpenFile> f = fi ? Handle(fi) : Writer(ino);
  // truncate(path) through another process's open writer: the caller must
  // be allowed to write the file itself.
  if (!fi && f) {
    if (int rc = CheckAccess(req, ino, W_OK); rc < 0) return rc;
  }
  if (f && f->writer()) return f->Truncate(CallerFnOf(req), size);
  // No writer: a new version of that size, published at once.
  OpenFile temp(&env_, ino, OpenFile::Role::kWriter);
  int rc = temp.Truncate(CallerFnOf(req), size);
  return rc < 0 ? rc : temp.Publish();
}

int MaruFs::CheckAccess(fuse_req_t req, fuse_ino_t ino, int mask) {
  rpc::RefRequest r;
  *r.mutable_ref() = RefTo(ino);
  r.set_access(static_cast<uint32_t>(mask & 7));
  rpc::AttrReply rep;
  return Call(req, &Stub::GetAttr, r, &rep);
}

// --- Namespace ------------------------------------------------------------------

void MaruFs::Mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t) {
  if (!S_ISREG(mode)) return (void)fuse_reply_err(req, EPERM);  // no devices, FIFOs, sockets
  rpc::CreateRequest r;
  *r.mutable_ref() = RefTo(parent, name);
  r.set_mode(mode & 07777);
  rpc::ChunkReply created;
  int rc = Call(req, &Stub::Create, r, &created);
  if (rc == 0) rc = SealEmpty(req, created.attr());
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  rpc::RefRequest a;
  *a.mutable_ref() = RefTo(created.attr().ino());
  rpc::AttrReply attr;
  rc = Call(req, &Stub::GetAttr, a, &attr);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  ReplyEntry(req, attr.attr());
}

int MaruFs::SealEmpty(fuse_req_t req, const rpc::Attr &created) {
  rpc::SealRequest seal;
  seal.set_ino(created.ino());
  seal.set_gen(created.gen());
  rpc::ChunkReply sealed;
  int rc = Call(req, &Stub::Seal, seal, &sealed);
  if (rc < 0) {
    rpc::HandleRequest abort;  // leave no unfinished file behind
    abort.set_ino(seal.ino());
    abort.set_gen(seal.gen());
    rpc::ErrorReply ignored;
    Call(req, &Stub::Abort, abort, &ignored);
  }
  return rc;
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

std::shared_ptr<OpenFile> MaruFs::NewFile(uint64_t ino, OpenFile::Role role) {
  return std::make_shared<OpenFile>(&env_, ino, role);
}

void MaruFs::AddOpen(const std::shared_ptr<OpenFile> &f) {
  MutexLock lock(&mu_);
  open_[f->ino()].push_back(f);
}

void MaruFs::ForgetClosed(uint64_t ino) {
  MutexLock lock(&mu_);
  auto it = open_.find(ino);
  if (it == open_.end()) return;
  auto &files = it->second;
  files.erase(std::remove_if(files.begin(), files.end(), [](auto &w) { return w.expired(); }),
              files.end());
  if (files.empty()) open_.erase(it);
}

std::vector<std::shared_ptr<OpenFile>> MaruFs::OpenFilesOf(uint64_t ino) {
  std::vector<std::shared_ptr<OpenFile>> files;
  MutexLock lock(&mu_);
  auto it = open_.find(ino);
  if (it == open_.end()) return files;
  for (const std::weak_ptr<OpenFile> &w : it->second)
    if (std::shared_ptr<OpenFile> f = w.lock()) files.push_back(std::move(f));
  return files;
}

std::shared_ptr<OpenFile> MaruFs::AnyOpen(uint64_t ino) {
  std::vector<std::shared_ptr<OpenFile>> files = OpenFilesOf(ino);
  return files.empty() ? nullptr : files.front();
}

void MaruFs::Published(uint64_t ino, uint64_t gen) {
  // Written through the page cache, the kernel's pages are this version.
  MutexLock lock(&mu_);
  cached_gen_[ino] = DirectWrites() ? 0 : gen;
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
  std::shared_ptr<OpenFile> f = NewFile(rep.attr().ino(), OpenFile::Role::kWriter);
  rc = f->AdoptCreated(rep, CallerOf(req));
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  AddWriter(f);
  AddOpen(f);
  SetHandle(fi, f);
  fi->keep_cache = 0;
  fi->direct_io = DirectWrites();
  fuse_entry_param e = EntryOf(rep.attr());
  e.attr.st_size = 0;
  e.attr_timeout = 0;
  fuse_reply_create(req, &e, fi);
}

void MaruFs::Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) {
  const bool reading = (fi->flags & O_ACCMODE) == O_RDONLY && !(fi->flags & O_TRUNC);
  std::shared_ptr<OpenFile> f;
  int rc = reading ? OpenReader(req, ino, fi, &f) : OpenWriter(req, ino, fi, &f);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  AddOpen(f);
  SetHandle(fi, f);
  fuse_reply_open(req, fi);
}

int MaruFs::OpenReader(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi,
                       std::shared_ptr<OpenFile> *f) {
  *f = NewFile(ino, OpenFile::Role::kReader);
  // A file this mount is still writing is read from its writer; once the
  // writer published it, from the server like any other.
  std::shared_ptr<OpenFile> w = Writer(ino);
  if (w && !w->Published()) {
    (*f)->Follow(std::move(w));
    // The kernel's pages are the writer's, unless its writes bypass them.
    fi->keep_cache = !DirectWrites();
    fi->direct_io = DirectWrites();
    return 0;
  }
  if (int rc = (*f)->OpenSealed(CallerOf(req)); rc < 0) return rc;
  // The page cache is valid as long as it holds this very version.
  MutexLock lock(&mu_);
  uint64_t &cached = cached_gen_[ino];
  fi->keep_cache = cached == (*f)->gen();
  // Sealed bytes are read from the pool, which is the cache: one copy into
  // the reader's buffer, none kept in the page cache (mmap still fills it).
  fi->direct_io = DirectReads();
  cached = (*f)->gen();
  return 0;
}

int MaruFs::OpenWriter(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi,
                       std::shared_ptr<OpenFile> *f) {
  // Writing a sealed file writes a new version of it.
  *f = NewFile(ino, OpenFile::Role::kWriter);
  const uint64_t keep = (fi->flags & O_TRUNC) ? 0 : UINT64_MAX;
  if (int rc = (*f)->StartVersion(CallerOf(req), keep); rc < 0) return rc;
  // The server dropped the set-id bits, if any, for anyone but root; the
  // kernel's cached mode must not go on showing them. Attributes only (an
  // offset of -1): the kernel then invalidates no pages, so this worker
  // never waits here for a writeback of dirty pages (a mapping of a
  // cached_writes file), whose write may itself need a worker (a new
  // version, a larger reservation): with every worker here, none would be
  // left for it. The inode is not being evicted either: this open holds it.
  if (session_ && fuse_req_ctx(req)->uid != 0)
    fuse_lowlevel_notify_inval_inode(session_, ino, -1, 0);
  AddWriter(*f);
  fi->keep_cache = 0;
  fi->direct_io = DirectWrites();
  return 0;
}

void MaruFs::Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info *fi) {
  // The open file's extent map, then one reply from the pool mapping: no
  // message, and for a sealed file no lock (OpenFile::Read).
  const uint64_t start = static_cast<uint64_t>(off);
  OpenFile::ReadView v;
  const bool may_wait = !MustNotWait();
  if (int rc = Handle(fi)->Read(start, size, &v, may_wait); rc < 0) {
    if (rc == -EWOULDBLOCK && !may_wait) return HandToWorker(req);  // its writer waits
    return (void)fuse_reply_err(req, FsErrno(rc));
  }
  if (v.len == 0) return (void)fuse_reply_buf(req, nullptr, 0);
  // Sealed bytes never change: the kernel may splice them from the pool
  // file. A writer's bytes may, so they are copied while it is locked. A
  // ring's reply goes into its entry, not to /dev/fuse, where a spliced one
  // would go: it is copied.
  if (options_.splice && v.sealed && !FuseRing::Serving()) {
    PoolBufvec data(*pool_, *v.map, start, v.len, true);
    return (void)fuse_reply_data(req, data.get(), FUSE_BUF_SPLICE_MOVE);
  }
  PoolIovec data(*pool_, *v.map, start, v.len);
  if (data.count() < kMaxReplyPieces) return (void)fuse_reply_iov(req, data.data(), data.count());
  // More pieces than one writev takes: copied into one buffer by libfuse.
  PoolBufvec copy(*pool_, *v.map, start, v.len);
  fuse_reply_data(req, copy.get(), FUSE_BUF_NO_SPLICE);
}

void MaruFs::WriteBuf(fuse_req_t req, fuse_ino_t, fuse_bufvec *in, off_t off, fuse_file_info *fi) {
  const uint64_t start = static_cast<uint64_t>(off), len = fuse_buf_size(in);
  const bool may_wait = !MustNotWait();
  ssize_t copied = Handle(fi)->Write(
      CallerFnOf(req), start, len,
      [&](const ExtentMap &map) {
        PoolBufvec dst(*pool_, map, start, len);
        return fuse_buf_copy(dst.get(), in, FUSE_BUF_NO_SPLICE);
      },
      may_wait);
  // A write that asks the server for room holds up no other file's reads.
  if (copied == -EWOULDBLOCK && !may_wait) return HandToWorker(req);
  if (copied < 0) return (void)fuse_reply_err(req, FsErrno(static_cast<int>(copied)));
  fuse_reply_write(req, static_cast<size_t>(copied));
}

void MaruFs::Flush(fuse_req_t req, fuse_ino_t, fuse_file_info *fi) {
  // close() of a writer publishes the file: readers can open it as soon as
  // close returns.
  int rc = Handle(fi)->Publish();
  fuse_reply_err(req, rc < 0 ? FsErrno(rc) : 0);
}

void MaruFs::Fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info *fi) {
  // As close: when fsync returns, the file is sealed and published, with
  // its metadata in RocksDB. A later write on the descriptor starts a new
  // version, as after a close. A reader's descriptor has nothing to do,
  // even one reading a file this mount is writing: only its writer
  // decides when the file is complete.
  int rc = Handle(fi)->Publish();
  fuse_reply_err(req, rc < 0 ? FsErrno(rc) : 0);
}

void MaruFs::Release(fuse_req_t req, fuse_ino_t, fuse_file_info *fi) {
  std::shared_ptr<OpenFile> f = TakeHandle(fi);
  if (int rc = f->Publish(); rc < 0)
    LOG_WARN("sealing inode %" PRIu64 " at release: %s", f->ino(), strerror(FsErrno(rc)));
  if (f->writer()) RemoveWriter(f);
  const uint64_t ino = f->ino();
  f.reset();  // the last reference, unless a reader follows it
  ForgetClosed(ino);
  fuse_reply_err(req, 0);
}

// --- Directories ----------------------------------------------------------------

int MaruFs::FetchDirPage(fuse_req_t req, fuse_ino_t ino, DirHandle *dir) {
  rpc::ReaddirRequest r;
  *r.mutable_ref() = RefTo(ino);
  r.set_max(kReaddirPage);
  if (!dir->entries.empty()) r.set_after(dir->entries.back().name());
  rpc::ReaddirReply rep;
  if (int rc = Call(req, &Stub::Readdir, r, &rep); rc < 0) return rc;
  dir->self = rep.dir();
  const int got = rep.entries_size();
  for (auto &e : *rep.mutable_entries()) dir->entries.push_back(std::move(e));
  dir->eof = rep.eof() || got == 0;  // an empty page ends it too: never loop
  return 0;
}

void MaruFs::OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) {
  auto dir = std::make_unique<DirHandle>();
  // The first page now: it checks access, and small directories need no more.
  // (Nobody else has the handle yet: its lock is taken for the analysis.)
  int rc;
  {
    MutexLock lock(&dir->mu);
    rc = FetchDirPage(req, ino, dir.get());
  }
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  fi->fh = reinterpret_cast<uint64_t>(dir.release());
  fi->cache_readdir = 0;
  fuse_reply_open(req, fi);
}

void MaruFs::ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info *fi,
                     bool plus) {
  auto *dir = reinterpret_cast<DirHandle *>(fi->fh);
  std::vector<char> buf(size);
  size_t used = 0;
  int failed = 0;
  {
    // Unlocked before the reply: once it is sent, the handle may be released.
    MutexLock lock(&dir->mu);
    used = ListDir(req, ino, dir, &buf, static_cast<size_t>(off), plus, &failed);
  }
  if (failed < 0 && used == 0) return (void)fuse_reply_err(req, FsErrno(failed));
  fuse_reply_buf(req, buf.data(), used);
}

size_t MaruFs::ListDir(fuse_req_t req, fuse_ino_t ino, DirHandle *dir, std::vector<char> *out,
                       size_t off, bool plus, int *failed) {
  const size_t size = out->size();
  char *buf = out->data();
  size_t used = 0;
  // Offset i + 1 resumes after position i.
  for (size_t i = off;; ++i) {
    if (i >= dir->count()) {
      if (dir->eof) break;
      // On failure what was listed goes now; the next call tries again.
      if ((*failed = FetchDirPage(req, ino, dir)) < 0 || i >= dir->count()) break;
    }
    std::string name;
    rpc::Attr attr;
    dir->At(i, ino, &name, &attr);
    const off_t next = static_cast<off_t>(i + 1);
    size_t n = plus ? AddDirEntryPlus(req, buf + used, size - used, name, attr, next, i < 2)
                    : AddDirEntry(req, buf + used, size - used, name, attr, next);
    if (n > size - used) break;
    used += n;
  }
  return used;
}

size_t MaruFs::AddDirEntry(fuse_req_t req, char *buf, size_t room, const std::string &name,
                           const rpc::Attr &attr, off_t next) {
  struct stat st {};
  st.st_ino = attr.ino();
  st.st_mode = attr.mode();
  return fuse_add_direntry(req, buf, room, name.c_str(), &st, next);
}

size_t MaruFs::AddDirEntryPlus(fuse_req_t req, char *buf, size_t room, const std::string &name,
                               const rpc::Attr &attr, off_t next, bool dot) {
  fuse_entry_param e{};
  if (dot) {  // "." and "..": no lookup count taken
    e.attr.st_ino = attr.ino();
    e.attr.st_mode = attr.mode();
  } else {
    e = EntryOf(attr);
  }
  return fuse_add_direntry_plus(req, buf, room, name.c_str(), &e, next);
}

void MaruFs::ReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info *fi) {
  delete reinterpret_cast<DirHandle *>(fi->fh);
  fuse_reply_err(req, 0);
}

void MaruFs::FsyncDir(fuse_req_t req, fuse_ino_t, int, fuse_file_info *) {
  // Nothing is left to do: the server writes every change of the namespace
  // through to RocksDB before it replies.
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
  std::string value;
  int rc = xattrs_.Get(CallerOf(req), ino, name, &value);
  if (rc < 0) return (void)fuse_reply_err(req, FsErrno(rc));
  ReplyXattr(req, value, size);
}

void MaruFs::ListXattr(fuse_req_t req, fuse_ino_t, size_t size) {
  ReplyXattr(req, Xattrs::List(), size);
}

void MaruFs::SetXattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                      size_t size, int) {
  int rc = xattrs_.Set(CallerOf(req), ino, name, std::string(value, size));
  fuse_reply_err(req, FsErrno(rc));
}

void MaruFs::RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
  fuse_reply_err(req, FsErrno(xattrs_.Remove(CallerOf(req), ino, name)));
}

void MaruFs::Access(fuse_req_t req, fuse_ino_t ino, int mask) {
  fuse_reply_err(req, FsErrno(CheckAccess(req, ino, mask)));
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
    o.fsync = [](fuse_req_t r, fuse_ino_t i, int d, fuse_file_info *fi) {
      Fs(r)->Fsync(r, i, d, fi);
    };
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
    o.fsyncdir = [](fuse_req_t r, fuse_ino_t i, int d, fuse_file_info *fi) {
      Fs(r)->FsyncDir(r, i, d, fi);
    };
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
