// MaruFs: the file operations of maru-fuse, over the FUSE low-level API.
//
// Each handler adapts one FUSE request: metadata calls become RPCs to
// maru-server, carrying the identity of the process that made them (the
// server enforces permissions); open files are OpenFile (open_file.h), which
// owns reading, writing and publishing versions; extended attributes are
// Xattrs (xattrs.h). MaruFs itself keeps what the mount shares: the writers
// open on it, by inode, and which version the page cache holds.
// What other readers see while a file is being written is in
// docs/filesystem.md.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "client/meta_client.h"
#include "client/pool_map.h"
#include "fs/open_file.h"
#include "fs/xattrs.h"
#include "util/checksum.h"
#include "util/mutex.h"

namespace maru {

struct FsOptions {
  double attr_timeout = 1.0;                    // sealed files and directories
  double entry_timeout = 1.0;                   // names; negative lookups are never cached
  ChecksumKind checksum = ChecksumKind::kXxh3;  // recorded at seal
  // All I/O bypasses the page cache, also where the kernel cannot allow
  // MAP_SHARED mmap of such files (FUSE_DIRECT_IO_ALLOW_MMAP, kernel 6.6).
  bool direct_io = false;
  // Reads of sealed files go through the page cache (two copies, and the
  // bytes held twice). Without it they bypass it wherever the kernel still
  // allows mmap of such files (SetMmapAllowed); the pool is the cache.
  bool cached_reads = false;
  // Writers bypass the page cache (each write one copy, from the writer's
  // buffer into the pool). With false, writes go through it, and the next
  // reader on this mount finds the pages cached.
  bool direct_writes = true;
  // Replies to reads splice from the pool file instead of copying from the
  // mapping (file pools; devdax cannot splice). Off by default: on a tmpfs
  // pool it measured 10-40 % slower than the copy (docs/benchmarks.md).
  bool splice = false;
};

// An open directory: its entries, fetched a page at a time as the listing
// reaches them (a million-entry directory starts listing at once, and the
// server's lock is held for one page at a time), listed at offsets that
// stay stable while it is read even if entries come and go.
struct DirHandle {
  Mutex mu;                                           // readers of one handle take turns
  std::vector<rpc::DirEntry> entries GUARDED_BY(mu);  // fetched so far, in name order
  rpc::Attr self GUARDED_BY(mu);
  bool eof GUARDED_BY(mu) = false;  // every entry fetched
  size_t count() const REQUIRES(mu) { return entries.size() + 2; }
  // Position i of the listing: 0 is ".", 1 is "..", 2 + k is entry k.
  void At(size_t i, fuse_ino_t ino, std::string *name, rpc::Attr *attr) const REQUIRES(mu) {
    if (i >= 2) {
      *name = entries[i - 2].name();
      *attr = entries[i - 2].attr();
      return;
    }
    *name = i == 0 ? "." : "..";
    *attr = self;
    // Not 0: readdir(3) hides entries whose inode is 0.
    if (i == 1) attr->set_ino(ino == FUSE_ROOT_ID || !self.parent() ? ino : self.parent());
  }
};

class MaruFs {
 public:
  MaruFs(std::unique_ptr<MetaClient> client, std::unique_ptr<PoolMap> pool, FsOptions options);
  // Lets go of the files still open (the mount went, or the daemon was
  // stopped, before their RELEASE): versions never sealed are aborted.
  // Call once no request is served any more.
  ~MaruFs();
  static const fuse_lowlevel_ops *Operations();
  // The session serving it, for notifications to the kernel.
  void SetSession(fuse_session *se) { session_ = se; }
  // Whether the kernel lets files opened with direct I/O be mmapped shared:
  // known once the INIT is answered, before any file is opened.
  void SetMmapAllowed(bool allowed) { mmap_allowed_ = allowed; }
  // Whether reads of sealed files bypass the page cache.
  bool DirectReads() const {
    return options_.direct_io || (!options_.cached_reads && mmap_allowed_);
  }

  // The operations; see fuse_lowlevel.h for their contracts.
  void Init(fuse_conn_info *conn);
  void Lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
  void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi);
  void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, fuse_file_info *fi);
  void Mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
  void Mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
  void Unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
  void Rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
  void Rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
              const char *newname, unsigned int flags);
  void Create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, fuse_file_info *fi);
  void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi);
  void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info *fi);
  void WriteBuf(fuse_req_t req, fuse_ino_t ino, fuse_bufvec *bufv, off_t off, fuse_file_info *fi);
  void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi);
  void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi);
  void Fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info *fi);
  void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi);
  // The next page of an open directory's entries; negative errno.
  int FetchDirPage(fuse_req_t req, fuse_ino_t ino, DirHandle *dir) REQUIRES(dir->mu);
  // Fills `out` with entries from position `off`, fetching pages as needed;
  // returns the bytes used. A failed fetch sets `failed` (negative errno).
  size_t ListDir(fuse_req_t req, fuse_ino_t ino, DirHandle *dir, std::vector<char> *out, size_t off,
                 bool plus, int *failed) REQUIRES(dir->mu);
  void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info *fi,
               bool plus);
  void ReleaseDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi);
  void FsyncDir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info *fi);
  void Statfs(fuse_req_t req, fuse_ino_t ino);
  void SetXattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
                int flags);
  void GetXattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
  void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size);
  void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char *name);
  void Access(fuse_req_t req, fuse_ino_t ino, int mask);

 private:
  template <typename Req, typename Rep>
  int Call(fuse_req_t req, MetaClient::Method<Req, Rep> method, Req &r, Rep *rep);
  void ToStat(const rpc::Attr &a, struct stat *st);
  fuse_entry_param EntryOf(const rpc::Attr &a);
  void ReplyEntry(fuse_req_t req, const rpc::Attr &a);
  // Publishes a file just created, empty (mknod); aborts it on failure.
  int SealEmpty(fuse_req_t req, const rpc::Attr &created);
  // One entry of a readdir reply; its size, larger than `room` if it does
  // not fit. Plus: with its attributes, and a lookup count unless `dot`.
  size_t AddDirEntry(fuse_req_t req, char *buf, size_t room, const std::string &name,
                     const rpc::Attr &attr, off_t next);
  size_t AddDirEntryPlus(fuse_req_t req, char *buf, size_t room, const std::string &name,
                         const rpc::Attr &attr, off_t next, bool dot);
  double AttrTimeout(const rpc::Attr &a) const;
  bool DirectWrites() const { return options_.direct_io || options_.direct_writes; }
  // The writers open on this mount, by inode.
  std::shared_ptr<OpenFile> Writer(uint64_t ino) EXCLUDES(mu_);
  void AddWriter(const std::shared_ptr<OpenFile> &f) EXCLUDES(mu_);
  void RemoveWriter(const std::shared_ptr<OpenFile> &f) EXCLUDES(mu_);
  std::shared_ptr<OpenFile> NewFile(uint64_t ino, OpenFile::Role role);
  // An open file's handle (fi->fh) is a reference to its OpenFile, made
  // here and taken back at RELEASE; those never released go with MaruFs.
  void SetHandle(fuse_file_info *fi, const std::shared_ptr<OpenFile> &f) EXCLUDES(mu_);
  std::shared_ptr<OpenFile> TakeHandle(fuse_file_info *fi) EXCLUDES(mu_);
  // The files open on this mount, by inode: fstat comes without a handle,
  // and a file unlinked while open is known only to them.
  void AddOpen(const std::shared_ptr<OpenFile> &f) EXCLUDES(mu_);
  void ForgetClosed(uint64_t ino) EXCLUDES(mu_);
  std::shared_ptr<OpenFile> AnyOpen(uint64_t ino);
  // Copies, taken under mu_: an open file's lock is never taken under it.
  std::vector<std::shared_ptr<OpenFile>> OpenFilesOf(uint64_t ino) EXCLUDES(mu_);
  // A seal published version `gen`: the page cache holds it if the writes
  // went through the page cache.
  void Published(uint64_t ino, uint64_t gen) EXCLUDES(mu_);
  int OpenReader(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi, std::shared_ptr<OpenFile> *f);
  int OpenWriter(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi, std::shared_ptr<OpenFile> *f);
  // A size change is a write: through the open writer, or a new version.
  int Resize(fuse_req_t req, fuse_ino_t ino, uint64_t size, fuse_file_info *fi);
  int CheckAccess(fuse_req_t req, fuse_ino_t ino, int mask);

  std::unique_ptr<MetaClient> client_;
  fuse_session *session_ = nullptr;
  std::unique_ptr<PoolMap> pool_;
  FsOptions options_;
  bool mmap_allowed_ = false;
  FileEnv env_;  // before writers_: open files use it until they go
  Xattrs xattrs_;
  Mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<OpenFile>> writers_ GUARDED_BY(mu_);  // by inode
  // inode -> version in the page cache
  std::unordered_map<uint64_t, uint64_t> cached_gen_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, std::vector<std::weak_ptr<OpenFile>>> open_ GUARDED_BY(mu_);
  std::unordered_set<std::shared_ptr<OpenFile> *> handles_ GUARDED_BY(mu_);  // not yet released
};

}  // namespace maru
