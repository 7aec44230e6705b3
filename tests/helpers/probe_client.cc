// A raw gRPC client for the trust-boundary tests: requests as an attacker
// sends them (naming any session, lease or inode; libmaru_direct only ever
// names its own), and without libmaru_direct, which needs the pool mapped,
// so that it runs as a user who cannot open the pool at all. Run it under
// `setpriv` or with the `uid N +` prefix to be another uid. Each command
// prints what the server answered and exits 0 when that is what it expects,
// 70 when not, other codes when it could not get that far.
//
//   probe_client ADDRESS [uid N +] CMD ARGS...
//   uid N                        become uid/gid N (before connecting)
//   mkdir PATH MODE              make a directory with MODE (octal)
//   create-seal PATH SIZE        create PATH (mode 0644) and seal it at SIZE
//                                without writing a byte
//   lookup-repeat PATH N ERR     one LookupPrefix naming PATH N times must
//                                fail with ERR (0: succeed)
//   open-until PATH N ERR        open PATH N times keeping each lease: the
//                                last open must fail with ERR, the others succeed
//   alloc-until SIZE N ERR       N allocations of SIZE under no name in one
//                                session: the last must fail with ERR, the
//                                others succeed
//   session-strings CLIENT HOST INSTANCE ERR   open a session whose strings
//                                have these lengths: the error must be ERR
//   check-extents SESSION UID DEVICE OFFSET LENGTH ERR   ask, as an agent
//                                does, whether SESSION of UID holds the
//                                extent: the answer must be ERR
//   raw-victim DIR OUT GO        open a session; reserve DIR/writing; store
//                                DIR/read (0600), open it (a lease) and unlink
//                                it; write "SESSION WINO WGEN RINO RGEN" to
//                                OUT; heartbeat until the file GO exists; then
//                                the session must still be alive with its
//                                lease, and the seal of DIR/writing must succeed
//   raw-abort SESSION INO GEN ERR   Abort naming SESSION: must fail with ERR
//   raw-close SESSION ERR           CloseSession of SESSION: must fail with ERR
//   raw-open-ino INO ERR            Open by inode number: must fail with ERR
//   raw-claim-held INO GEN N        a new session claiming it held a lease on
//                                   (INO, GEN): N leases must be renewed
//   hold-removed DIR SIZE N ERR   N times: create DIR/fI (SIZE bytes), seal it,
//                                open it (a lease) and unlink it, keeping the
//                                lease: the last create must fail with ERR
//   sessions-until N ERR         opens N sessions (left open): the last must
//                                fail with ERR, the others succeed
//   rename FROM TO ERR           rename FROM to TO: must fail with ERR (0: succeed)
//   nest DIR CHAINS LEVELS ERR    makes directories DIRK/a/a/... LEVELS deep
//                                for K < CHAINS, then renames each DIRK into
//                                the deepest directory of DIRK+1, nesting them
//                                ever deeper: the first rename that fails
//                                must fail with ERR (0: none may fail)
//   ping N                        one session, then N Statfs calls: prints the
//                                 latency's p50, p99 and max in µs ("ping
//                                 p50 X p99 Y max Z"); over TCP with the
//                                 client's MARU_TLS_* and MARU_TOKEN_FILE
//   fast-hello PORT TICKET_HEX TOKEN  presents a ticket (and TOKEN) to the
//                                 fast lane on 127.0.0.1:PORT; prints
//                                 "admitted" (exit 0) or "refused" (1)
//   tcp-flood PORT SOURCES EACH GO  opens EACH connections to 127.0.0.1:PORT
//                                 from each of SOURCES addresses 127.2.x.y
//                                 and holds them, idle; prints "opened N"
//                                 and waits for the file GO to exist
//   index-set INDEX FIELD VALUE     writes VALUE into FIELD of the index's
//                                   header (entries, entries_offset, regions,
//                                   slots_per_region, regions_offset, key0), as
//                                   a member of the pool's group may; needs
//                                   no server (ADDRESS is ignored)
//   index-forge-notes INDEX REGION  fills REGION's ring of read notes with
//                                   notes stamped a day ahead, naming entry 0
#include <fcntl.h>
#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <ctime>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "client/tcp_auth.h"
#include "index_layout.h"
#include "maru.grpc.pb.h"
#include "proto/fast_lane.h"
#include "util/address.h"
#include "util/frame.h"

namespace maru_test {

namespace {

using Stub = maru::rpc::Meta::Stub;
namespace rpc = maru::rpc;

constexpr int kMismatch = 70;

std::string g_token;  // a TCP caller's bearer token (MARU_TOKEN_FILE), sent with every call

std::unique_ptr<Stub> Dial(const std::string &address) {
  maru::Result<maru::Address> addr = maru::ParseAddress(address);
  if (!addr.ok()) return nullptr;
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (addr->kind == maru::Address::Kind::kTcp) {
    maru::Result<maru::TcpClientAuth> auth = maru::TcpClientAuthFromEnv();
    if (!auth.ok()) return nullptr;
    credentials = auth->credentials;
    g_token = auth->token;
  }
  return rpc::Meta::NewStub(grpc::CreateChannel(addr->GrpcTarget(), credentials));
}

// One call; the reply's error, or -1 when the transport failed.
template <typename Req, typename Rep>
int Send(Stub *stub, grpc::Status (Stub::*method)(grpc::ClientContext *, const Req &, Rep *),
         const Req &req, Rep *rep) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!g_token.empty()) ctx.AddMetadata("authorization", "Bearer " + g_token);
  grpc::Status s = (stub->*method)(&ctx, req, rep);
  if (!s.ok()) {
    fprintf(stderr, "transport: %s\n", s.error_message().c_str());
    return -1;
  }
  return static_cast<int>(rep->error());
}

// Prints what the server answered; 0 if it is `want`.
int Expect(const std::string &what, int got, uint64_t want) {
  printf("%s: %d\n", what.c_str(), got);
  return static_cast<uint64_t>(got) == want ? 0 : kMismatch;
}

uint64_t OpenSession(Stub *stub, rpc::OpenSessionRequest req = {}) {
  req.set_client("probe_client");
  rpc::OpenSessionReply rep;
  return Send(stub, &Stub::OpenSession, req, &rep) == 0 ? rep.session() : 0;
}

template <typename Req>
Req With(uint64_t session) {
  Req r;
  r.mutable_header()->set_session(session);
  return r;
}

int CreateSeal(Stub *stub, uint64_t session, const std::string &path, uint64_t size) {
  auto create = With<rpc::CreateRequest>(session);
  create.mutable_ref()->set_path(path);
  create.set_size(size);
  create.set_mode(0644);
  rpc::ChunkReply created;
  if (int err = Send(stub, &Stub::Create, create, &created)) return Expect("create", err, 0);
  auto seal = With<rpc::SealRequest>(session);
  seal.set_ino(created.attr().ino());
  seal.set_gen(created.attr().gen());
  seal.set_size(size);
  rpc::ChunkReply sealed;
  return Expect("seal", Send(stub, &Stub::Seal, seal, &sealed), 0);
}

int Mkdir(Stub *stub, uint64_t session, const std::string &path, const std::string &mode) {
  auto req = With<rpc::MkdirRequest>(session);
  req.mutable_ref()->set_path(path);
  req.set_mode(static_cast<uint32_t>(strtoul(mode.c_str(), nullptr, 8)));
  rpc::AttrReply rep;
  return Expect("mkdir", Send(stub, &Stub::Mkdir, req, &rep), 0);
}

int LookupRepeat(Stub *stub, uint64_t session, const std::string &path, int n, uint64_t want) {
  auto req = With<rpc::LookupPrefixRequest>(session);
  for (int i = 0; i < n; ++i) req.add_paths(path);
  rpc::LookupPrefixReply rep;
  return Expect("lookup", Send(stub, &Stub::LookupPrefix, req, &rep), want);
}

int Ping(Stub *stub, uint64_t session, int n) {
  std::vector<int64_t> us;
  for (int i = 0; i < n; ++i) {
    auto req = With<rpc::StatfsRequest>(session);
    rpc::StatfsReply rep;
    const auto start = std::chrono::steady_clock::now();
    if (int err = Send(stub, &Stub::Statfs, req, &rep)) return Expect("statfs", err, 0);
    us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(us.begin(), us.end());
  if (us.empty()) return 64;
  printf("ping p50 %ld p99 %ld max %ld\n", static_cast<long>(us[us.size() / 2]),
         static_cast<long>(us[us.size() * 99 / 100]), static_cast<long>(us.back()));
  return 0;
}

// What a process holding someone else's fast-lane ticket can do with it.
int FastHello(int port, const std::string &ticket_hex, const std::string &token) {
  std::string hello;
  for (size_t i = 0; i + 1 < ticket_hex.size(); i += 2)
    hello += static_cast<char>(strtoul(ticket_hex.substr(i, 2).c_str(), nullptr, 16));
  hello += token;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  uint8_t code = 0;
  std::string reply;
  const bool admitted = connect(fd, reinterpret_cast<sockaddr *>(&to), sizeof(to)) == 0 &&
                        maru::WriteFrame(fd, maru::fastlane::kHello, hello).ok() &&
                        maru::ReadFrame(fd, &code, &reply, maru::fastlane::kMaxHello).ok() &&
                        code == maru::fastlane::kReplyOk;
  close(fd);
  printf("%s\n", admitted ? "admitted" : "refused");
  return admitted ? 0 : 1;
}

// Opens connections and keeps them, saying nothing on them: what an
// attacker does to take a server's descriptors.
int TcpFlood(int port, int sources, int each, const std::string &go) {
  std::vector<int> held;
  for (int s = 0; s < sources; ++s) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl((127u << 24) | (2u << 16) | ((s / 200u) << 8) | (s % 200u + 10));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < each; ++i) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) break;
      if (bind(fd, reinterpret_cast<sockaddr *>(&from), sizeof(from)) != 0 ||
          (connect(fd, reinterpret_cast<sockaddr *>(&to), sizeof(to)) != 0 &&
           errno != EINPROGRESS)) {
        close(fd);
        continue;
      }
      held.push_back(fd);
    }
  }
  printf("opened %zu\n", held.size());
  fflush(stdout);
  struct stat st;
  while (stat(go.c_str(), &st) != 0) usleep(20000);  // a heartbeat's pace: it only holds
  for (int fd : held) close(fd);
  return 0;
}

int Rename(Stub *stub, uint64_t session, const std::string &from, const std::string &to,
           uint64_t want) {
  auto req = With<rpc::RenameRequest>(session);
  req.mutable_from()->set_path(from);
  req.mutable_to()->set_path(to);
  rpc::ErrorReply rep;
  return Expect("rename", Send(stub, &Stub::Rename, req, &rep), want);
}

int Nest(Stub *stub, uint64_t session, const std::string &dir, int chains, int levels,
         uint64_t want) {
  std::string deep;
  for (int i = 0; i < levels; ++i) deep += "/a";
  for (int k = 0; k < chains; ++k) {
    auto req = With<rpc::MkdirRequest>(session);
    req.mutable_ref()->set_path(dir + std::to_string(k) + deep);
    req.set_mode(0755);
    req.set_parents(true);
    rpc::AttrReply rep;
    if (int err = Send(stub, &Stub::Mkdir, req, &rep)) return Expect("mkdir", err, 0);
  }
  for (int k = 1; k < chains; ++k) {
    auto req = With<rpc::RenameRequest>(session);
    req.mutable_from()->set_path(dir + std::to_string(k - 1));
    req.mutable_to()->set_path(dir + std::to_string(k) + deep + "/x");
    rpc::ErrorReply rep;
    if (int err = Send(stub, &Stub::Rename, req, &rep))
      return Expect("rename " + std::to_string(k), err, want);
  }
  return Expect("every rename", 0, want);
}

// Calls `one(i)` for i = 1..n: each must answer 0 but the last, `want`.
template <typename F>
int Until(const std::string &what, int n, uint64_t want, F one) {
  for (int i = 1; i <= n; ++i)
    if (int rc = Expect(what + " " + std::to_string(i), one(i), i == n ? want : 0)) return rc;
  return 0;
}

int HoldRemoved(Stub *stub, uint64_t session, const std::string &dir, uint64_t size, int n,
                uint64_t want) {
  return Until("create", n, want, [&](int i) {
    const std::string path = dir + "/f" + std::to_string(i);
    auto create = With<rpc::CreateRequest>(session);
    create.mutable_ref()->set_path(path);
    create.set_size(size);
    create.set_mode(0644);
    create.set_parents(true);
    rpc::ChunkReply created;
    if (int err = Send(stub, &Stub::Create, create, &created)) return err;
    auto seal = With<rpc::SealRequest>(session);
    seal.set_ino(created.attr().ino());
    seal.set_gen(created.attr().gen());
    seal.set_size(size);
    seal.set_keep_lease(true);  // read on, as a reader would
    rpc::ChunkReply sealed;
    if (int err = Send(stub, &Stub::Seal, seal, &sealed)) return 1000 + err;
    auto unlink = With<rpc::RefRequest>(session);
    unlink.mutable_ref()->set_path(path);
    rpc::ErrorReply unlinked;
    if (int err = Send(stub, &Stub::Unlink, unlink, &unlinked)) return 2000 + err;
    return 0;
  });
}

int SessionsUntil(Stub *stub, int n, uint64_t want) {
  return Until("session", n, want, [&](int) {
    rpc::OpenSessionRequest req;
    req.set_client("probe_client");
    rpc::OpenSessionReply rep;
    return Send(stub, &Stub::OpenSession, req, &rep);
  });
}

int OpenUntil(Stub *stub, uint64_t session, const std::string &path, int n, uint64_t want) {
  return Until("open", n, want, [&](int) {
    auto req = With<rpc::RefRequest>(session);
    req.mutable_ref()->set_path(path);
    rpc::ChunkReply rep;
    return Send(stub, &Stub::Open, req, &rep);
  });
}

int AllocUntil(Stub *stub, uint64_t session, uint64_t size, int n, uint64_t want) {
  return Until("alloc", n, want, [&](int) {
    auto req = With<rpc::AllocRequest>(session);
    req.set_size(size);
    rpc::ChunkReply rep;
    return Send(stub, &Stub::Alloc, req, &rep);
  });
}

int SessionStrings(Stub *stub, size_t client, size_t host, size_t instance, uint64_t want) {
  rpc::OpenSessionRequest req;
  req.set_client(std::string(client, 'c'));
  req.set_hostname(std::string(host, 'h'));
  req.set_instance(std::string(instance, 'i'));
  rpc::OpenSessionReply rep;
  return Expect("open session", Send(stub, &Stub::OpenSession, req, &rep), want);
}

// Opens `n` sessions (left to time out) and prints how many were given a
// region of lease slots in the shared-memory index.
int Sessions(Stub *stub, uint64_t n) {
  uint64_t regions = 0;
  for (uint64_t i = 0; i < n; ++i) {
    rpc::OpenSessionRequest req;
    req.set_client("probe_client");
    rpc::OpenSessionReply rep;
    if (int err = Send(stub, &Stub::OpenSession, req, &rep)) return Expect("open session", err, 0);
    regions += rep.index_region() != 0;
  }
  printf("regions %lu\n", static_cast<unsigned long>(regions));
  return 0;
}

int CheckExtents(Stub *stub, const std::vector<uint64_t> &n) {
  auto req = With<rpc::CheckExtentsRequest>(OpenSession(stub));
  req.set_client_session(n[0]);
  req.set_client_uid(static_cast<uint32_t>(n[1]));
  req.set_device(static_cast<uint32_t>(n[2]));
  rpc::Extent *e = req.add_extents();
  e->set_device(static_cast<uint32_t>(n[2]));
  e->set_offset(n[3]);
  e->set_length(n[4]);
  rpc::ErrorReply rep;
  return Expect("check extents", Send(stub, &Stub::CheckExtents, req, &rep), n[5]);
}

int Victim(Stub *stub, const std::string &dir, const std::string &out, const std::string &go) {
  const uint64_t session = OpenSession(stub);
  if (!session) return 71;
  auto create = [&](const std::string &path, uint32_t mode, rpc::ChunkReply *rep) {
    auto req = With<rpc::CreateRequest>(session);
    req.mutable_ref()->set_path(path);
    req.set_size(4096);
    req.set_mode(mode);
    req.set_parents(true);
    return Send(stub, &Stub::Create, req, rep);
  };
  rpc::ChunkReply writing, read, opened;
  if (create(dir + "/writing", 0600, &writing) || create(dir + "/read", 0600, &read)) return 72;
  auto seal = With<rpc::SealRequest>(session);
  seal.set_ino(read.attr().ino());
  seal.set_gen(read.attr().gen());
  seal.set_size(4096);
  rpc::ChunkReply sealed;
  if (Send(stub, &Stub::Seal, seal, &sealed)) return 73;
  auto ref = With<rpc::RefRequest>(session);
  ref.mutable_ref()->set_path(dir + "/read");
  rpc::ErrorReply unlinked;
  if (Send(stub, &Stub::Open, ref, &opened) || Send(stub, &Stub::Unlink, ref, &unlinked)) return 74;
  std::ofstream(out + ".tmp") << session << " " << writing.attr().ino() << " "
                              << writing.attr().gen() << " " << read.attr().ino() << " "
                              << read.attr().gen() << "\n";
  rename((out + ".tmp").c_str(), out.c_str());
  auto beat = With<rpc::HeartbeatRequest>(session);
  rpc::HeartbeatReply alive;
  struct stat st;
  while (stat(go.c_str(), &st) != 0) {
    if (Send(stub, &Stub::Heartbeat, beat, &alive)) return Expect("heartbeat", alive.error(), 0);
    usleep(20000);  // a heartbeat's pace, not a wait for a condition
  }
  if (Send(stub, &Stub::Heartbeat, beat, &alive) || alive.leases() != 1)
    return Expect("leases still held", static_cast<int>(alive.leases()), 1);
  seal.set_ino(writing.attr().ino());
  seal.set_gen(writing.attr().gen());
  return Expect("seal", Send(stub, &Stub::Seal, seal, &sealed), 0);
}

// Maps `bytes` of the index file read-write, as a client of the pool's
// group does; null if it cannot.
void *MapIndex(const std::string &path, size_t bytes) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return nullptr;
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

int IndexSet(const std::string &path, const std::string &field, uint64_t value) {
  namespace ix = maru::index;
  void *p = MapIndex(path, ix::kPage);
  if (!p) return Expect("map " + path, errno, 0);
  auto *h = static_cast<ix::Header *>(p);
  if (field == "entries")
    h->entries = value;
  else if (field == "entries_offset")
    h->entries_offset = value;
  else if (field == "regions")
    h->regions = static_cast<uint32_t>(value);
  else if (field == "slots_per_region")
    h->slots_per_region = static_cast<uint32_t>(value);
  else if (field == "regions_offset")
    h->regions_offset = value;
  else if (field == "key0")
    h->key[0] = value;
  else
    return 64;
  munmap(p, ix::kPage);
  printf("%s = %lu\n", field.c_str(), static_cast<unsigned long>(value));
  return 0;
}

int IndexForgeNotes(const std::string &path, uint32_t region) {
  namespace ix = maru::index;
  void *head = MapIndex(path, ix::kPage);
  if (!head) return Expect("map " + path, errno, 0);
  const auto *h = static_cast<ix::Header *>(head);
  const size_t bytes = ix::FileBytes(h->entries, h->regions);
  const bool ok = region < h->regions;
  munmap(head, ix::kPage);
  if (!ok) return 64;
  void *base = MapIndex(path, bytes);
  if (!base) return Expect("map " + path, errno, 0);
  const auto *header = static_cast<ix::Header *>(base);
  ix::ReadNote *ring = ix::Ring(ix::RegionAt(base, *header, region));
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const uint64_t ahead = (now.tv_sec + 86400) * 1000000000ull + now.tv_nsec;
  for (uint32_t i = 0; i < ix::kRingSize; ++i) {
    ring[i].pos.store(0);
    ring[i].gen.store(0);
    ring[i].stamp_ns.store(ahead);
  }
  munmap(base, bytes);
  printf("forged %u notes\n", ix::kRingSize);
  return 0;
}

// The commands that name someone else's session, lease or inode.
int RawProbe(Stub *stub, const std::string &op, const std::vector<uint64_t> &n) {
  if (op == "raw-abort") {
    auto req = With<rpc::HandleRequest>(n[0]);
    req.set_ino(n[1]);
    req.set_gen(n[2]);
    rpc::ErrorReply rep;
    return Expect("abort", Send(stub, &Stub::Abort, req, &rep), n[3]);
  }
  if (op == "raw-close") {
    auto req = With<rpc::HeartbeatRequest>(n[0]);
    rpc::ErrorReply rep;
    return Expect("close", Send(stub, &Stub::CloseSession, req, &rep), n[1]);
  }
  if (op == "raw-open-ino") {
    auto req = With<rpc::RefRequest>(OpenSession(stub));
    req.mutable_ref()->set_ino(n[0]);
    rpc::ChunkReply rep;
    return Expect("open by inode", Send(stub, &Stub::Open, req, &rep), n[1]);
  }
  if (op == "raw-claim-held") {
    rpc::OpenSessionRequest req;
    rpc::HeldLease *held = req.add_held();
    held->set_lease(1);
    held->set_ino(n[0]);
    held->set_gen(n[1]);
    req.set_client("probe_client");
    rpc::OpenSessionReply rep;
    if (Send(stub, &Stub::OpenSession, req, &rep)) return 71;
    return Expect("renewed", rep.renewed_size(), n[2]);
  }
  fprintf(stderr, "unknown command %s\n", op.c_str());
  return 64;
}

int Run(const std::string &address, const std::vector<std::string> &cmd) {
  const std::string &op = cmd[0];
  auto arg = [&](size_t i) { return i < cmd.size() ? cmd[i] : std::string(); };
  std::vector<uint64_t> n;  // the arguments as numbers, from the first
  for (size_t i = 1; i < cmd.size() || n.size() < 8; ++i)
    n.push_back(strtoull(arg(i).c_str(), nullptr, 0));
  if (op == "index-set") return IndexSet(arg(1), arg(2), n[2]);
  if (op == "index-forge-notes") return IndexForgeNotes(arg(1), static_cast<uint32_t>(n[1]));
  if (op == "fast-hello") return FastHello(static_cast<int>(n[0]), arg(2), arg(3));
  if (op == "tcp-flood")
    return TcpFlood(static_cast<int>(n[0]), static_cast<int>(n[1]), static_cast<int>(n[2]), arg(4));
  std::unique_ptr<Stub> stub = Dial(address);
  if (!stub) return 69;
  if (op == "raw-victim") return Victim(stub.get(), arg(1), arg(2), arg(3));
  if (op == "session-strings") return SessionStrings(stub.get(), n[0], n[1], n[2], n[3]);
  if (op == "check-extents") return CheckExtents(stub.get(), n);
  if (op == "sessions") return Sessions(stub.get(), n[0]);
  if (op == "sessions-until") return SessionsUntil(stub.get(), static_cast<int>(n[0]), n[1]);
  if (op.rfind("raw-", 0) == 0) return RawProbe(stub.get(), op, n);
  const uint64_t session = OpenSession(stub.get());
  if (!session) return 71;
  const int count = static_cast<int>(n[1]);
  if (op == "create-seal") return CreateSeal(stub.get(), session, arg(1), n[1]);
  if (op == "mkdir") return Mkdir(stub.get(), session, arg(1), arg(2));
  if (op == "lookup-repeat") return LookupRepeat(stub.get(), session, arg(1), count, n[2]);
  if (op == "open-until") return OpenUntil(stub.get(), session, arg(1), count, n[2]);
  if (op == "alloc-until") return AllocUntil(stub.get(), session, n[0], count, n[2]);
  if (op == "hold-removed")
    return HoldRemoved(stub.get(), session, arg(1), n[1], static_cast<int>(n[2]), n[3]);
  if (op == "ping") return Ping(stub.get(), session, static_cast<int>(n[0]));
  if (op == "rename") return Rename(stub.get(), session, arg(1), arg(2), n[2]);
  if (op == "nest")
    return Nest(stub.get(), session, arg(1), static_cast<int>(n[1]), static_cast<int>(n[2]), n[3]);
  fprintf(stderr, "unknown command %s\n", op.c_str());
  return 64;
}

}  // namespace

}  // namespace maru_test

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: probe_client ADDRESS [uid N +] CMD ARGS...\n");
    return 98;
  }
  std::vector<std::string> cmd(argv + 2, argv + argc);
  if (cmd.size() > 3 && cmd[0] == "uid" && cmd[2] == "+") {
    const auto id = static_cast<uid_t>(strtoul(cmd[1].c_str(), nullptr, 0));
    if (setgroups(0, nullptr) || setgid(id) || setuid(id)) return 2;
    cmd.erase(cmd.begin(), cmd.begin() + 3);
  }
  return maru_test::Run(argv[1], cmd);
}
