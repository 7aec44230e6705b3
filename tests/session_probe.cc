// Raw-protocol probes for the integration tests: requests that name any
// session, lease or inode, as an attacker would send them (libmaru_direct
// only ever names its own). gRPC only, no libmaru_direct.
//
//   session_probe ADDRESS [uid N +] CMD ARGS...
//   uid N                   become uid/gid N (before connecting)
//   raw-victim DIR OUT GO   open a session; reserve DIR/writing; store DIR/read
//                           (0600), open it (a lease) and unlink it; write
//                           "SESSION WINO WGEN RINO RGEN" to OUT; heartbeat
//                           until the file GO exists; then the session must
//                           still be alive with its lease, and the seal of
//                           DIR/writing must succeed
//   raw-abort SESSION INO GEN ERR   Abort naming SESSION: must fail with ERR
//   raw-close SESSION ERR           CloseSession of SESSION: must fail with ERR
//   raw-open-ino INO ERR            Open by inode number: must fail with ERR
//   raw-claim-held INO GEN N        a new session claiming it held a lease on
//                                   (INO, GEN): N leases must be renewed
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "maru.grpc.pb.h"
#include "util/address.h"

namespace maru_test {

namespace {

using Stub = maru::rpc::Meta::Stub;

std::unique_ptr<Stub> Dial(const std::string &address) {
  maru::Result<maru::Address> addr = maru::ParseAddress(address);
  if (!addr.ok()) return nullptr;
  auto channel = grpc::CreateChannel(addr->GrpcTarget(), grpc::InsecureChannelCredentials());
  return maru::rpc::Meta::NewStub(channel);
}

// One call; the reply's error, or -1 when the transport failed.
template <typename Req, typename Rep>
int Send(Stub *stub, grpc::Status (Stub::*method)(grpc::ClientContext *, const Req &, Rep *),
         const Req &req, Rep *rep) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status s = (stub->*method)(&ctx, req, rep);
  if (!s.ok()) {
    fprintf(stderr, "transport: %s\n", s.error_message().c_str());
    return -1;
  }
  return rep->error();
}

uint64_t OpenSession(Stub *stub, maru::rpc::OpenSessionRequest req = {}) {
  req.set_client("session_probe");
  maru::rpc::OpenSessionReply rep;
  return Send(stub, &Stub::OpenSession, req, &rep) == 0 ? rep.session() : 0;
}

int Expect(const std::string &what, int got, uint64_t want) {
  printf("%s: %d\n", what.c_str(), got);
  return static_cast<uint64_t>(got) == want ? 0 : 70;
}

int Victim(Stub *stub, const std::string &dir, const std::string &out, const std::string &go) {
  const uint64_t session = OpenSession(stub);
  if (!session) return 71;
  auto create = [&](const std::string &path, uint32_t mode, maru::rpc::ChunkReply *rep) {
    maru::rpc::CreateRequest req;
    req.mutable_header()->set_session(session);
    req.mutable_ref()->set_path(path);
    req.set_size(4096);
    req.set_mode(mode);
    req.set_parents(true);
    return Send(stub, &Stub::Create, req, rep);
  };
  maru::rpc::ChunkReply writing, read, opened;
  if (create(dir + "/writing", 0600, &writing) || create(dir + "/read", 0600, &read)) return 72;
  maru::rpc::SealRequest seal;
  seal.mutable_header()->set_session(session);
  seal.set_ino(read.attr().ino());
  seal.set_gen(read.attr().gen());
  seal.set_size(4096);
  maru::rpc::ChunkReply sealed;
  if (Send(stub, &Stub::Seal, seal, &sealed)) return 73;
  maru::rpc::RefRequest ref;
  ref.mutable_header()->set_session(session);
  ref.mutable_ref()->set_path(dir + "/read");
  maru::rpc::ErrorReply unlinked;
  if (Send(stub, &Stub::Open, ref, &opened) || Send(stub, &Stub::Unlink, ref, &unlinked)) return 74;
  std::ofstream(out + ".tmp") << session << " " << writing.attr().ino() << " "
                              << writing.attr().gen() << " " << read.attr().ino() << " "
                              << read.attr().gen() << "\n";
  rename((out + ".tmp").c_str(), out.c_str());
  maru::rpc::HeartbeatRequest beat;
  beat.mutable_header()->set_session(session);
  maru::rpc::HeartbeatReply alive;
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

int RunProbe(const std::string &address, const std::vector<std::string> &cmd) {
  const std::string &op = cmd[0];
  auto arg = [&](size_t i) { return i < cmd.size() ? cmd[i] : std::string(); };
  auto num = [&](size_t i) { return strtoull(arg(i).c_str(), nullptr, 0); };
  std::unique_ptr<Stub> stub = Dial(address);
  if (!stub) return 69;
  if (op == "raw-victim") return Victim(stub.get(), arg(1), arg(2), arg(3));
  if (op == "raw-abort") {
    maru::rpc::HandleRequest req;
    req.mutable_header()->set_session(num(1));
    req.set_ino(num(2));
    req.set_gen(num(3));
    maru::rpc::ErrorReply rep;
    return Expect("abort", Send(stub.get(), &Stub::Abort, req, &rep), num(4));
  }
  if (op == "raw-close") {
    maru::rpc::HeartbeatRequest req;
    req.mutable_header()->set_session(num(1));
    maru::rpc::ErrorReply rep;
    return Expect("close", Send(stub.get(), &Stub::CloseSession, req, &rep), num(2));
  }
  if (op == "raw-open-ino") {
    maru::rpc::RefRequest req;
    req.mutable_header()->set_session(OpenSession(stub.get()));
    req.mutable_ref()->set_ino(num(1));
    maru::rpc::ChunkReply rep;
    return Expect("open by inode", Send(stub.get(), &Stub::Open, req, &rep), num(2));
  }
  if (op == "raw-claim-held") {
    maru::rpc::OpenSessionRequest req;
    maru::rpc::HeldLease *held = req.add_held();
    held->set_lease(1);
    held->set_ino(num(1));
    held->set_gen(num(2));
    req.set_client("session_probe");
    maru::rpc::OpenSessionReply rep;
    if (Send(stub.get(), &Stub::OpenSession, req, &rep)) return 71;
    return Expect("renewed", rep.renewed_size(), num(3));
  }
  fprintf(stderr, "unknown probe %s\n", op.c_str());
  return 64;
}

}  // namespace

}  // namespace maru_test

int main(int argc, char **argv) {
  std::vector<std::string> cmd(argv + 2, argv + argc);
  if (argc < 3) return 98;
  if (cmd.size() > 3 && cmd[0] == "uid" && cmd[2] == "+") {
    const auto id = static_cast<uid_t>(strtoul(cmd[1].c_str(), nullptr, 0));
    if (setgid(id) || setuid(id)) return 2;
    cmd.erase(cmd.begin(), cmd.begin() + 3);
  }
  return maru_test::RunProbe(argv[1], cmd);
}
