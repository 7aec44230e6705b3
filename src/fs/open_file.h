// OpenFile: one open file of maru-fuse, and the state machine of writing one.
//
// A reader holds a lease on one sealed version and reads straight from the
// pool mapping. A writer writes one version at a time:
//
//   Create, StartVersion  a new version: a reservation (extents only this
//                         writer may write), grown on demand by Write and
//                         Truncate; the kept part of the old content is
//                         copied in first
//   Publish               seals it (close, fsync): others may open it now;
//                         the writer keeps a lease to read on
//   Write, Truncate       after a Publish: StartVersion again, keeping the
//                         content, as a rewrite of a sealed file does
//   last reference gone   a version never sealed is aborted; the lease or
//                         the reservation is given back
//   file removed          (unlinked or replaced by another, anywhere) the
//                         writer goes on in a version of its own under no
//                         name (an allocation, grown by copying), which is
//                         never sealed and goes at the last close: the
//                         temp-file pattern (create, unlink, write, fsync,
//                         ftruncate) works as on a local filesystem
//
// Processes on this mount that read a file while it is written follow its
// writer (one kernel inode, one file, as on a local filesystem): they read
// its bytes, and hold a reference so that its extents stay reserved or
// leased until they close. Other mounts and libmaru_direct see the previous
// sealed version, or EBUSY if there is none.
//
// No FUSE types here: the file system (MaruFs) turns requests into these
// calls, and their results (0, a byte count, or a negative errno) into
// replies.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "alloc/extent_map.h"
#include "client/meta_client.h"
#include "client/pool_map.h"
#include "proto/maru.pb.h"
#include "util/checksum.h"
#include "util/mutex.h"

namespace maru {

// What the open files of one mount share.
struct FileEnv {
  MetaClient *client = nullptr;
  const PoolMap *pool = nullptr;
  ChecksumKind checksum = ChecksumKind::kXxh3;  // recorded at seal
  // Told each version a writer published, for the page-cache bookkeeping.
  std::function<void(uint64_t ino, uint64_t gen)> published;
};

class OpenFile {
 public:
  // Who makes a request, asked only when an RPC needs it: it costs a read
  // of /proc (the caller's groups), too much for every write.
  using CallerFn = std::function<rpc::Caller()>;

  enum class Role { kReader, kWriter };
  OpenFile(const FileEnv *env, uint64_t ino, Role role);
  // Whoever lets go last (a handle, a reader following a writer, a
  // temporary) gives back the lease or reservation, aborting a version that
  // was never sealed.
  ~OpenFile();
  OpenFile(const OpenFile &) = delete;
  OpenFile &operator=(const OpenFile &) = delete;

  uint64_t ino() const { return ino_; }
  bool writer() const { return role_ == Role::kWriter; }

  // --- Readers ---
  // Opens the file's sealed version under a lease.
  int OpenSealed(const rpc::Caller &caller);
  // The version a reader opened (set once, before the file is shared).
  uint64_t gen() const { return gen_; }
  // Reads through `writer` instead: a file this mount is writing.
  void Follow(std::shared_ptr<OpenFile> writer) { follows_ = std::move(writer); }

  // What a read replies from: the extents, and the length of the range
  // that lies in the file (0 past its end). A writer's bytes may still
  // change (`sealed` false): the view holds its lock while it lives.
  struct ReadView {
    ReadView() = default;
    ReadView(const ReadView &) = delete;
    ReadView &operator=(const ReadView &) = delete;
    ~ReadView() { Unlock(); }
    // Lets the writer's lock go before the view does. Read hands its
    // caller a lock held past its return, which the analysis cannot
    // follow: unchecked here and there.
    void Unlock() NO_THREAD_SAFETY_ANALYSIS {
      if (locked) locked->Unlock();
      locked = nullptr;
    }
    const ExtentMap *map = nullptr;
    uint64_t len = 0;
    bool sealed = true;
    Mutex *locked = nullptr;  // a writer's lock, held while the view lives
  };
  // The view of [start, start+size). -EIO when a sealed version's lease may
  // have lapsed: its extents may hold another chunk by now. A sealed file's
  // read takes no lock and sends no message while the lease surely holds.
  // Unless `may_wait`, -EWOULDBLOCK rather than wait for a writer's lock
  // (held across its calls to the server).
  int Read(uint64_t start, uint64_t size, ReadView *view,
           bool may_wait = true) NO_THREAD_SAFETY_ANALYSIS;  // see ReadView

  // --- Writers ---
  // Takes over the new, empty file a Create RPC replied with.
  int AdoptCreated(const rpc::ChunkReply &created, const rpc::Caller &caller);
  // Starts a new version (O_TRUNC, or writing a sealed file), keeping the
  // first `keep` bytes of the current content.
  int StartVersion(const rpc::Caller &caller, uint64_t keep) EXCLUDES(mu_);
  // Writes `len` bytes at `start`: `copy` fills the pool behind them and
  // returns the bytes copied or a negative errno. Returns the same. Unless
  // `may_wait`, -EWOULDBLOCK, with nothing written, where the write would
  // wait on the server (a new version, a larger reservation) or on the lock
  // of a write that does.
  using CopyIn = std::function<ssize_t(const ExtentMap &map)>;
  ssize_t Write(const CallerFn &caller, uint64_t start, uint64_t len, const CopyIn &copy,
                bool may_wait = true) EXCLUDES(mu_);
  // Sets the size; growing it adds zeros.
  int Truncate(const CallerFn &caller, uint64_t size) EXCLUDES(mu_);
  // Seals what was written since the last Publish, if anything; 0 for
  // readers, whose version is sealed already.
  int Publish() EXCLUDES(mu_);
  // Whether everything written is published.
  bool Published() EXCLUDES(mu_);
  // The attributes the server last gave for the version this file holds,
  // its size what it holds: what fstat shows once the server no longer
  // answers for the file (unlinked while open). False if it has none.
  // Mode, owner and times come from NoteAttr: the server's open reply is
  // slim. Without one, a regular file with no permission bits.
  bool LastAttr(rpc::Attr *attr) EXCLUDES(mu_);
  // The attributes the server gave for this inode since it was opened.
  void NoteAttr(const rpc::Attr &attr) EXCLUDES(mu_);
  // What stat shows for a file this writer writes: false if the server's
  // version `server_gen` is newer than this writer's published one.
  bool WrittenSize(uint64_t server_gen, uint64_t *size, uint64_t *allocated) EXCLUDES(mu_);

 private:
  bool PublishedLocked() const REQUIRES(mu_) { return sealed_ && !dirty_; }
  // A new version is needed before writing: the current one is sealed, or
  // there is none yet (a temporary writer for truncate).
  bool NeedsVersion() const REQUIRES(mu_) { return sealed_ || gen_ == 0; }
  int NewVersion(const rpc::Caller &caller, uint64_t keep) REQUIRES(mu_);
  // Write's work, with mu_ held.
  ssize_t WriteLocked(const CallerFn &caller, uint64_t start, uint64_t len, const CopyIn &copy,
                      bool may_wait) REQUIRES(mu_);
  // Asks the server for a new version with room for `size` bytes.
  int CreateVersion(const rpc::Caller &caller, uint64_t size, rpc::ChunkReply *rep);
  // A version under no name of `size` bytes, for a writer whose file is gone.
  int AllocVersion(const rpc::Caller &caller, uint64_t size, rpc::ChunkReply *rep);
  // Moves a detached writer's bytes into an allocation with room for `end`.
  int GrowDetached(const rpc::Caller &caller, uint64_t end) REQUIRES(mu_);
  // The current content a new version keeps: the version this writer
  // published (its lease moves along), or else the server's sealed one.
  std::shared_ptr<OpenFile> MovePublished();
  int OpenCurrent(std::shared_ptr<OpenFile> *old);
  int Reserve(const CallerFn &caller, uint64_t end) REQUIRES(mu_);
  int Seal() REQUIRES(mu_);
  void ReleaseLease();
  // The extents of a reply, checked to lie in the pool; -EIO if not.
  int MapOf(const rpc::ChunkReply &rep);
  // Applies `op` (FlushRange, InvalidateRange) to the bytes of [0, size_).
  void EachPoolRange(void (*op)(const void *, size_t));
  void Zero(uint64_t off, uint64_t len);
  void CopyFrom(const OpenFile &old, uint64_t len);

  const FileEnv *env_;
  const uint64_t ino_;
  const Role role_;
  // Writers: serializes writes, growth and sealing. gen_, size_, map_,
  // lease_, caller_ and attr_ are not marked: a reader's are set once,
  // before the file is shared, and read without it.
  Mutex mu_;
  uint64_t gen_ = 0;                       // the version read, or being written
  uint64_t size_ = 0;                      // readers: sealed size; writers: bytes written so far
  ExtentMap map_;                          // where the bytes are
  uint64_t lease_ = 0;                     // MetaClient lease handle once there is one, else 0
  MetaClient::LeaseWatch watch_;           // readers: lease_, checked without a lock
  bool sealed_ GUARDED_BY(mu_) = false;    // writers: published by a Publish
  bool detached_ GUARDED_BY(mu_) = false;  // writers: the file is gone; gen_ is an allocation
  bool dirty_ GUARDED_BY(mu_) = false;     // writers: written since the last Publish
  rpc::Caller caller_;                     // writers: who started the version, for the seal
  rpc::Attr attr_;                         // as the server last replied; ino 0 until then
  rpc::Attr noted_ GUARDED_BY(mu_);        // NoteAttr's; mode 0 until then
  std::shared_ptr<OpenFile> follows_;
};

}  // namespace maru
