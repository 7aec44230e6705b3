// MetaEngine: every metadata operation of maru-server, independent of gRPC.
//
// State lives in memory (namespace, sessions, leases, free space) and each
// change is written through to RocksDB before the reply leaves, so a
// restarted server finds every sealed chunk and every unfinished
// reservation again. One mutex serializes all operations: they are short
// (microseconds) and the RPC layer costs far more.
//
// Every operation takes the caller's identity (decided by the transport)
// and a request, and fills a reply whose `error` is a positive errno.
//
// meta_engine.cc coordinates (start, the id counters, the caller's session,
// housekeeping); each concept has its own file:
//   engine_sessions.cc       open, heartbeat, close and expiry of sessions;
//   engine_lease_renewal.cc  leases a client held before a restart;
//   engine_namespace.cc      attributes, directories, rename, unlink;
//   engine_chunks.cc         create, extend, seal, abort, open, release,
//                            prefix lookup, pin;
//   engine_batch.cc          the batched operations (several keys a call);
//   engine_allocations.cc    space under no name until published;
//   engine_parts.cc          layer-wise chunks: parts and waits for them;
//   engine_space.cc          allocation with eviction, retiring versions,
//                            removing files and reservations;
//   engine_replies.cc        attributes, devices and placements in replies;
//   engine_agents.cc         agents and the grants they check;
//   engine_index.cc          the shared-memory index's hooks;
//   engine_hints.cc          retention hints;
//   engine_quotas.cc         setting and listing quotas (QuotaTable accounts);
//   engine_recovery.cc       start: the pool's devices (pool_identity), then
//                            the inodes, space and sessions the database
//                            remembers;
//   engine_admin.cc          what maructl asks: stats, sessions, chunk
//                            listings, eviction by hand, fsck;
//   evictor                  (its own class) which chunks go when space runs
//                            out.
// engine_op.h holds what they share: Txn and RunOp.
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ha/pool_log.h"
#include "meta/access.h"
#include "meta/client_limits.h"
#include "meta/evictor.h"
#include "meta/lease_table.h"
#include "meta/meta_db.h"
#include "meta/namespace_tree.h"
#include "meta/op_stats.h"
#include "meta/part_table.h"
#include "meta/quota_table.h"
#include "meta/records.h"
#include "meta/session_table.h"
#include "meta/shm_index.h"
#include "meta/space_manager.h"
#include "proto/conversions.h"
#include "proto/maru.pb.h"
#include "util/mutex.h"

namespace maru {

class PhaseClock;

struct EngineOptions {
  std::vector<std::string> pool_paths;
  std::string db_dir;
  bool sync_writes = false;
  int64_t session_timeout_ms = 15000;
  uint32_t heartbeat_ms = 3000;
  uint32_t root_mode = 01777;
  // After a restart, freed extents wait this long (default: the session
  // timeout) so readers from before the restart can renew their leases.
  int64_t grace_ms = -1;
  double high_watermark = 0.95;  // start evicting above this fraction used
  double low_watermark = 0.90;   // ... until usage is below this
  // The eviction policy: "frequency", "lru" or "prefix".
  std::string eviction = "frequency";
  uint32_t max_fragments = 64;  // extents per chunk before a create fails
  std::string fast_lane;        // the fast lane's socket path, told to clients
  Limits limits;                // what one request and one session may ask (client_limits.h)
  bool index = true;            // publish the shared-memory index (shm_index.h)
  IndexOptions index_options;
  // The replication log (src/ha): when the pool has one, every metadata
  // write is appended to it, once `log_fence` (if set) says this server
  // still leads at `log_epoch`.
  uint64_t log_epoch = 0;
  std::function<bool()> log_fence;
  std::string log_key;  // signs each record (OpLog::Authenticate); empty: unsigned
  // Adds what the engine does not know to its stats: the pool's other
  // servers (ha/ha_member.h). Called under the engine's lock: it must only
  // copy what it holds.
  std::function<void(rpc::StatsReply *)> fill_server_stats;
};

class MetaEngine {
 public:
  static Result<std::unique_ptr<MetaEngine>> Open(const EngineOptions &options);
  ~MetaEngine();

  // --- Sessions (engine_sessions.cc) ---
  void OpenSession(const Caller &c, const rpc::OpenSessionRequest &req, rpc::OpenSessionReply *rep);
  void Heartbeat(const Caller &c, const rpc::HeartbeatRequest &req, rpc::HeartbeatReply *rep);
  void CloseSession(const Caller &c, const rpc::HeartbeatRequest &req, rpc::ErrorReply *rep);

  // --- The namespace (engine_namespace.cc) ---
  void GetAttr(const Caller &c, const rpc::RefRequest &req, rpc::AttrReply *rep);
  void Mkdir(const Caller &c, const rpc::MkdirRequest &req, rpc::AttrReply *rep);
  void Rmdir(const Caller &c, const rpc::RefRequest &req, rpc::ErrorReply *rep);
  void Unlink(const Caller &c, const rpc::RefRequest &req, rpc::ErrorReply *rep);
  void Rename(const Caller &c, const rpc::RenameRequest &req, rpc::ErrorReply *rep);
  void Readdir(const Caller &c, const rpc::ReaddirRequest &req, rpc::ReaddirReply *rep);
  void SetAttr(const Caller &c, const rpc::SetAttrRequest &req, rpc::AttrReply *rep);
  void Statfs(const Caller &c, const rpc::StatfsRequest &req, rpc::StatfsReply *rep);

  // --- Chunks (engine_chunks.cc) ---
  void Create(const Caller &c, const rpc::CreateRequest &req, rpc::ChunkReply *rep);
  void Extend(const Caller &c, const rpc::ExtendRequest &req, rpc::ChunkReply *rep);
  void Seal(const Caller &c, const rpc::SealRequest &req, rpc::ChunkReply *rep);
  void Abort(const Caller &c, const rpc::HandleRequest &req, rpc::ErrorReply *rep);
  void Open(const Caller &c, const rpc::RefRequest &req, rpc::ChunkReply *rep);
  void Release(const Caller &c, const rpc::ReleaseRequest &req, rpc::ErrorReply *rep);
  void LookupPrefix(const Caller &c, const rpc::LookupPrefixRequest &req,
                    rpc::LookupPrefixReply *rep);
  void Pin(const Caller &c, const rpc::PinRequest &req, rpc::AttrReply *rep);

  // --- Batches (engine_batch.cc) ---
  // A batch of more than the keys-per-call limit (Limits, by default
  // kBatchMax) fails whole with E2BIG, before any work; otherwise each
  // request gets its own result. A path named twice in one batch gets
  // EEXIST the second time.
  static constexpr int kBatchMax = static_cast<int>(Limits{}.keys_per_call);
  void CreateBatch(const Caller &c, const rpc::CreateBatchRequest &req, rpc::ChunkBatchReply *rep);
  void SealBatch(const Caller &c, const rpc::SealBatchRequest &req, rpc::ChunkBatchReply *rep);
  // LookupPrefix's walk without leases: counts sealed, readable chunks.
  void CountPrefix(const Caller &c, const rpc::LookupPrefixRequest &req,
                   rpc::CountPrefixReply *rep);
  void PinBatch(const Caller &c, const rpc::PinBatchRequest &req, rpc::ErrorsReply *rep);
  void UnlinkBatch(const Caller &c, const rpc::PathsRequest &req, rpc::ErrorsReply *rep);

  // --- Allocations (engine_allocations.cc) ---
  // A reservation under no name: a retired-while-written version of its
  // session (Session::orphan_gens), so that Abort, session expiry and a
  // restart treat it as they treat any reservation whose file went away.
  void Alloc(const Caller &c, const rpc::AllocRequest &req, rpc::ChunkReply *rep);
  void Publish(const Caller &c, const rpc::PublishRequest &req, rpc::ChunkReply *rep);

  // --- Layer-wise chunks (engine_parts.cc; waits in meta/part_table.h) ---
  // A read lease on a chunk that is sealed or being written; WaitPart
  // blocks (at most PartTable::kMaxWaitMs) until a part is published.
  void OpenPartial(const Caller &c, const rpc::RefRequest &req, rpc::ChunkReply *rep);
  void PublishPart(const Caller &c, const rpc::PartRequest &req, rpc::PartReply *rep);
  void WaitPart(const Caller &c, const rpc::PartRequest &req, rpc::PartReply *rep);

  // --- Retention hints (engine_hints.cc; the order in meta/eviction_frequency.h) ---
  void Hint(const Caller &c, const rpc::HintRequest &req, rpc::ErrorsReply *rep);

  // --- Quotas (engine_quotas.cc; accounting in meta/quota_table.h) ---
  void SetQuota(const Caller &c, const rpc::SetQuotaRequest &req, rpc::ErrorReply *rep);
  void ListQuotas(const Caller &c, const rpc::StatsRequest &req, rpc::QuotasReply *rep);

  // --- Agents and grants (engine_agents.cc) ---
  void RegisterAgent(const Caller &c, const rpc::RegisterAgentRequest &req,
                     rpc::RegisterAgentReply *rep);
  void CheckExtents(const Caller &c, const rpc::CheckExtentsRequest &req, rpc::ErrorReply *rep);
  void IssueGrant(const Caller &c, const rpc::IssueGrantRequest &req, rpc::GrantReply *rep);

  // --- Administration (engine_admin.cc) ---
  void ListSessions(const Caller &c, const rpc::StatsRequest &req, rpc::SessionsReply *rep);
  void Stats(const Caller &c, const rpc::StatsRequest &req, rpc::StatsReply *rep);
  void ListChunks(const Caller &c, const rpc::ListChunksRequest &req, rpc::ListChunksReply *rep);
  void Evict(const Caller &c, const rpc::EvictRequest &req, rpc::EvictReply *rep);
  void Fsck(const Caller &c, const rpc::StatsRequest &req, rpc::FsckReply *rep);
  // What Stats reports, without a session (for /metrics).
  void Snapshot(rpc::StatsReply *rep);
  // Every record of the metadata database, from one view (a standby's
  // bootstrap: src/ha/snapshot_service.h).
  Status ScanMetadata(const std::function<bool(std::string_view, std::string_view)> &emit) {
    return db_->Scan(emit);
  }

  // --- Housekeeping (meta_engine.cc) ---
  // Called periodically: expires dead sessions and pins, frees retired
  // extents whose readers are gone, evicts above the high watermark.
  void Tick();

  OpStats &op_stats() { return op_stats_; }
  const EngineOptions &options() const { return options_; }
  // The shared-memory index, or null (--no-index, or it could not be made).
  const ShmIndex *shm_index() const { return index_.get(); }

 private:
  class Txn;
  explicit MetaEngine(const EngineOptions &options);

  // --- Coordination (meta_engine.cc; RunOp in engine_op.h) ---
  template <typename Req, typename Rep, typename Op>
  void RunOp(const Caller &c, const Req &req, Rep *rep, Op &&op);
  // The live session `id` if the caller may use it: ENOTCONN when there is
  // none, EPERM when it is another uid's (a session id is no password).
  Result<Session *> LiveSession(const Caller &c, uint64_t id) REQUIRES(mu_);
  uint64_t NextIno(Txn &txn) REQUIRES(mu_);
  uint64_t NextGen(Txn &txn) REQUIRES(mu_);

  // --- Start (engine_recovery.cc) ---
  Status AttachReplicationLog() REQUIRES(mu_);
  Status Load() REQUIRES(mu_);
  // Fills `adopted` (in number order). `index`, if valid, is an index
  // being created (CreateIndex): it is filled once every inode is adopted.
  Status RestoreInodes(MetaDb::Contents &contents, MetaDb::Batch *batch, PhaseClock *clock,
                       std::vector<Inode *> *adopted,
                       std::future<Result<std::unique_ptr<ShmIndex>>> *index) REQUIRES(mu_);
  // Adopts the `decoded` records of `contents`, filling `adopted` in
  // record (inode number) order.
  void AdoptInodes(const MetaDb::Contents &contents, std::vector<std::unique_ptr<Inode>> &decoded,
                   MetaDb::Batch *batch, int64_t now, std::vector<Inode *> *adopted) REQUIRES(mu_);
  // Links `orphans` (what NamespaceTree::LinkAll could not) into
  // /lost+found, made if need be.
  void MoveOrphansToLostFound(const std::vector<Inode *> &orphans, MetaDb::Batch *batch,
                              int64_t now) REQUIRES(mu_);
  void RestoreChunk(Inode &inode) REQUIRES(mu_);
  Status RestoreRetired(const MetaDb::Contents &contents) REQUIRES(mu_);
  Session *OrphanedSession(uint64_t id, uint32_t uid) REQUIRES(mu_);

  // --- The shared-memory index (engine_index.cc) ---
  // Makes the index, enters every sealed file, and has space_ consult its
  // lease slots. A failure only leaves clients on messages.
  // Each runs beside the rest of a start: CreateIndex reads the options
  // and the space's size (known once the pool's identity is); FillIndex
  // enters the files of `order`, reading only the inodes of the tree (not
  // the links between them). InstallIndex puts it to use. The two run on
  // threads of their own, beside the start that holds the lock: they share
  // the engine by what they read, which the analysis cannot tell.
  Result<std::unique_ptr<ShmIndex>> CreateIndex() const NO_THREAD_SAFETY_ANALYSIS;
  Result<std::unique_ptr<ShmIndex>> FillIndex(Result<std::unique_ptr<ShmIndex>> made,
                                              const std::vector<Inode *> &order) const
      NO_THREAD_SAFETY_ANALYSIS;
  // An error only for a pool with a region for the index that could not
  // be made there (too small for --index-entries/--index-sessions).
  Status InstallIndex(Result<std::unique_ptr<ShmIndex>> made) REQUIRES(mu_);
  void AssignIndexRegion(const Caller &c, Session *s, rpc::OpenSessionReply *rep) REQUIRES(mu_);
  // CheckLease, counting the leases the session holds in its index slots too.
  int CheckLeaseCount(const Session &s) const REQUIRES(mu_);
  // Reads through the index count as opens do (hits, atime, eviction
  // order); done before any eviction decision.
  void NoteIndexReads() REQUIRES(mu_);

  // --- Sessions (engine_sessions.cc, engine_lease_renewal.cc) ---
  void ExpireSession(Txn &txn, uint64_t id) REQUIRES(mu_);
  void RenewHeldLeases(const Caller &c, const rpc::OpenSessionRequest &req, Session *s,
                       rpc::OpenSessionReply *rep) REQUIRES(mu_);
  bool MayRenew(const Caller &c, const rpc::HeldLease &held, bool resumed) REQUIRES(mu_);

  // --- The namespace (engine_namespace.cc) ---
  Result<Inode *> MakeDirectory(Txn &txn, Inode *dir, const std::string &name, uint32_t mode,
                                const Caller &c) REQUIRES(mu_);
  NamespaceTree::MakeDir DirMaker(Txn &txn, const Caller &c) REQUIRES(mu_);
  void TouchDir(Txn &txn, Inode *dir) REQUIRES(mu_);
  Status RemoveEntry(Txn &txn, const Caller &c, const rpc::Ref &ref, bool dir) REQUIRES(mu_);
  Status MaySetAttr(const Caller &c, const rpc::SetAttrRequest &req, const Inode &inode)
      REQUIRES(mu_);
  Result<uint64_t> NewParentChunk(const Caller &c, const rpc::SetAttrRequest &req,
                                  const Inode &inode) REQUIRES(mu_);
  Status MayRename(const Caller &c, const rpc::RenameRequest &req,
                   const NamespaceTree::ParentAndName &from, const NamespaceTree::ParentAndName &to,
                   const Inode &src, const Inode *dst) const REQUIRES(mu_);
  // Whether `moved` may go into `into` without a directory deeper than
  // kMaxDepth (NamespaceTree).
  bool FitsDepth(const Inode &moved, const Inode &into) const REQUIRES(mu_);

  // --- Chunks (engine_chunks.cc) ---
  // The bodies of Create and Seal, for calls that run several of them (or
  // one with more) under one lock and one commit.
  using TxnOp = std::function<Status(Txn &, Session *)>;
  TxnOp CreateOp(const Caller &c, const rpc::CreateRequest &req, rpc::ChunkReply *rep);
  TxnOp SealOp(const rpc::SealRequest &req, rpc::ChunkReply *rep);
  // Create's steps.
  Result<NamespaceTree::ParentAndName> CreateTarget(Txn &txn, const Caller &c,
                                                    const rpc::CreateRequest &req) REQUIRES(mu_);
  Status MayRewrite(const Caller &c, const rpc::CreateRequest &req, const Inode &inode)
      REQUIRES(mu_);
  Result<uint64_t> ParentChunk(const Caller &c, const std::string &path) REQUIRES(mu_);
  Inode *NewFile(Txn &txn, const Caller &c, const NamespaceTree::ParentAndName &pn, uint32_t mode,
                 int64_t now) REQUIRES(mu_);
  void Reserve(Txn &txn, Session *session, const Caller &c, const rpc::CreateRequest &req,
               Inode *inode, ExtentList extents, int64_t now) REQUIRES(mu_);
  Status OpenForRead(const Caller &c, Session *s, Inode *inode, rpc::ChunkReply *rep) REQUIRES(mu_);
  void ReleaseLeases(Txn &txn, Session *session,
                     const google::protobuf::RepeatedField<uint64_t> &ids) REQUIRES(mu_);

  // --- Space (engine_space.cc) ---
  // Space for `bytes`, evicting if the pool is full; `spared` (0: none) is
  // the chunk being rewritten, which must not be evicted to make room.
  Result<ExtentList> AllocateWithEviction(Txn &txn, uint64_t bytes, uint64_t spared) REQUIRES(mu_);
  // AllocateWithEviction for a writer's reservation: in one extent if
  // `contiguous` (ENOSPC otherwise), its stale bytes scrubbed for `c`
  // (pool_scrub.h). Holds nothing on failure.
  Result<ExtentList> AllocateForWriter(Txn &txn, const Caller &c, uint64_t bytes, uint64_t spared,
                                       bool contiguous) REQUIRES(mu_);
  // What eviction may do within `txn`: remove chunks, record freed space.
  Evictor::Scope EvictionScope(Txn &txn) REQUIRES(mu_);
  void RemoveFile(Txn &txn, Inode *inode) REQUIRES(mu_);
  void RemoveTree(Txn &txn, Inode *top) REQUIRES(mu_);
  void DropPending(Txn &txn, Inode *inode, bool keep_inode_record) REQUIRES(mu_);
  void UnrefGen(Txn &txn, uint64_t gen) REQUIRES(mu_);
  // Retires a version (a reservation if `writing`) and charges whoever still
  // reads it; LeaseEnded is the other end, when a lease goes.
  void RetireVersion(Txn &txn, const Version &v, uint64_t ino, bool writing) REQUIRES(mu_);
  void LeaseEnded(Txn &txn, uint64_t id, const Lease &lease) REQUIRES(mu_);

  // --- Replies (engine_replies.cc) ---
  void FillAttr(const Inode &inode, rpc::Attr *attr) const REQUIRES(mu_);
  void FillDevice(const SpaceManager::Device &d, rpc::Device *dev) const REQUIRES(mu_);
  // A chunk's placement. `slim` leaves out what the data path does not
  // need (owner, mode, times), which keeps batched lookups small.
  void FillChunk(const Inode &inode, const Version &v, uint64_t lease, rpc::ChunkReply *rep,
                 bool slim = false) const REQUIRES(mu_);

  // --- Layer-wise chunks (engine_parts.cc) ---
  Status OpenPartialPending(const Caller &c, Session *s, Inode *inode, rpc::ChunkReply *rep)
      REQUIRES(mu_);
  // One look at where the version `gen` of `ino` stands for a waiter of
  // part `part`: 0 (published), EAGAIN (not yet) or an error.
  int PartState(uint64_t ino, uint64_t gen, uint32_t part, rpc::PartReply *rep) REQUIRES(mu_);

  // --- Agents and grants (engine_agents.cc) ---
  // The extents behind a version's parts published so far.
  static ExtentList PublishedExtents(const Version &v);
  // Whether `session` holds every one of `extents` of `device`: a lease or
  // its own reservation, or (`writable`) its own unsealed reservation only.
  Status HoldsExtents(const Session &session, uint32_t device,
                      const google::protobuf::RepeatedPtrField<rpc::Extent> &extents, bool writable)
      REQUIRES(mu_);

  // --- Administration (engine_admin.cc) ---
  void FillStats(rpc::StatsReply *rep) REQUIRES(mu_);
  void FillTopDirs(rpc::StatsReply *rep) REQUIRES(mu_);
  // Stats' count of sessions by instance name, with few distinct names.
  void FillSessionsByInstance(rpc::StatsReply *rep) const REQUIRES(mu_);
  Status ListChunksUnder(const Caller &c, const rpc::ListChunksRequest &req,
                         rpc::ListChunksReply *rep) REQUIRES(mu_);
  uint64_t EvictOlderThan(Txn &txn, int64_t older_than_ms) REQUIRES(mu_);
  Status EvictPath(Txn &txn, const Caller &c, const std::string &path, uint64_t *bytes)
      REQUIRES(mu_);
  void CheckSpace(rpc::FsckReply *rep) REQUIRES(mu_);

  // --- State ---
  EngineOptions options_;
  std::unique_ptr<PoolLog> pool_log_;  // before db_: outlives its writes
  std::unique_ptr<MetaDb> db_;
  Mutex mu_;
  NamespaceTree tree_ GUARDED_BY(mu_);
  SessionTable sessions_ GUARDED_BY(mu_);
  LeaseTable leases_ GUARDED_BY(mu_);
  SpaceManager space_ GUARDED_BY(mu_);
  std::unique_ptr<Evictor> evictor_;          // reads tree_ and space_
  std::unique_ptr<ShmIndex> index_;           // reads tree_; space_ asks it (OutsideReaders)
  QuotaTable quotas_ GUARDED_BY(mu_){tree_};  // who may hold how much; reads tree_
  PartTable parts_ GUARDED_BY(mu_);           // readers of chunks being written in parts
  OpStats op_stats_;
  std::string pool_uuid_;
  uint64_t next_ino_ GUARDED_BY(mu_) = 2;
  uint64_t ino_limit_ GUARDED_BY(mu_) = 0;
  uint64_t next_gen_ GUARDED_BY(mu_) = 1;
  uint64_t gen_limit_ GUARDED_BY(mu_) = 0;
  int64_t started_ns_ = 0;
  uint64_t reserved_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t pins_ GUARDED_BY(mu_) = 0;
  // No pin set to expire expires before this; Tick looks for expired pins
  // (a walk of every inode) only once it has passed.
  int64_t next_pin_expiry_ns_ GUARDED_BY(mu_) = INT64_MAX;
  // Counters for stats and metrics.
  uint64_t lookups_ GUARDED_BY(mu_) = 0;
  uint64_t lookup_hits_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_stored_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_loaded_ GUARDED_BY(mu_) = 0;
  struct AgentInfo {
    std::string address;
    uint64_t session = 0;
  };
  std::map<uint32_t, AgentInfo> agents_ GUARDED_BY(mu_);  // device index -> the agent serving it
  // Signs grants; drawn at start, handed to agents at RegisterAgent.
  std::string grant_key_ GUARDED_BY(mu_);
  uint64_t grant_serial_ GUARDED_BY(mu_) = 0;
};

}  // namespace maru
