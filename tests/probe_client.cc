// A raw gRPC client for the trust-boundary tests: it speaks to maru-server
// without libmaru_direct, which needs the pool mapped, so that it runs as a
// user who cannot open the pool at all. Each command prints nothing on
// success and exits non-zero when the server did not answer what it expects.
//
//   probe_client ADDRESS CMD ARGS...
//     mkdir PATH MODE              make a directory with MODE (octal)
//     create-seal PATH SIZE        create PATH (mode 0644) and seal it at SIZE
//                                  without writing a byte
//     lookup-repeat PATH N ERR     one LookupPrefix naming PATH N times must
//                                  fail with ERR (0: succeed)
//     open-until PATH N ERR        open PATH N times keeping each lease: the
//                                  last open must fail with ERR, the others succeed
//     session-strings CLIENT HOST INSTANCE ERR   open a session whose strings
//                                  have these lengths: the error must be ERR
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "maru.grpc.pb.h"

namespace {

using maru::rpc::Meta;

int Fail(const std::string &what) {
  fprintf(stderr, "probe_client: %s\n", what.c_str());
  return 1;
}

template <typename Req, typename Rep, typename Method>
int Call(Meta::Stub *stub, Method method, const Req &req, Rep *rep) {
  grpc::ClientContext ctx;
  grpc::Status s = (stub->*method)(&ctx, req, rep);
  if (!s.ok()) return -1000 - s.error_code();
  return static_cast<int>(rep->error());
}

int OpenSession(Meta::Stub *stub, const maru::rpc::OpenSessionRequest &req, uint64_t *id) {
  maru::rpc::OpenSessionReply rep;
  int err = Call(stub, &Meta::Stub::OpenSession, req, &rep);
  *id = rep.session();
  return err;
}

int CreateSeal(Meta::Stub *stub, uint64_t session, const std::string &path, uint64_t size) {
  maru::rpc::CreateRequest create;
  create.mutable_header()->set_session(session);
  create.mutable_ref()->set_path(path);
  create.set_size(size);
  create.set_mode(0644);
  maru::rpc::ChunkReply created;
  if (int err = Call(stub, &Meta::Stub::Create, create, &created))
    return Fail("create: " + std::to_string(err));
  maru::rpc::SealRequest seal;
  seal.mutable_header()->set_session(session);
  seal.set_ino(created.attr().ino());
  seal.set_gen(created.attr().gen());
  seal.set_size(size);
  maru::rpc::ChunkReply sealed;
  if (int err = Call(stub, &Meta::Stub::Seal, seal, &sealed))
    return Fail("seal: " + std::to_string(err));
  return 0;
}

int LookupRepeat(Meta::Stub *stub, uint64_t session, const std::string &path, int n, int want) {
  maru::rpc::LookupPrefixRequest req;
  req.mutable_header()->set_session(session);
  for (int i = 0; i < n; ++i) req.add_paths(path);
  maru::rpc::LookupPrefixReply rep;
  int err = Call(stub, &Meta::Stub::LookupPrefix, req, &rep);
  if (err != want) return Fail("lookup: error " + std::to_string(err));
  return 0;
}

int OpenUntil(Meta::Stub *stub, uint64_t session, const std::string &path, int n, int want) {
  for (int i = 1; i <= n; ++i) {
    maru::rpc::RefRequest req;
    req.mutable_header()->set_session(session);
    req.mutable_ref()->set_path(path);
    maru::rpc::ChunkReply rep;
    int err = Call(stub, &Meta::Stub::Open, req, &rep);
    if (err != (i == n ? want : 0))
      return Fail("open " + std::to_string(i) + ": error " + std::to_string(err));
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3) return Fail("usage: probe_client ADDRESS CMD ARGS...");
  auto stub = Meta::NewStub(grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  const std::string op = argv[2];
  auto arg = [&](int i) { return std::string(i + 2 < argc ? argv[i + 2] : ""); };
  auto num = [&](int i) { return strtoull(arg(i).c_str(), nullptr, 0); };
  maru::rpc::OpenSessionRequest open;
  open.set_client("probe_client");
  if (op == "session-strings") {
    open.set_client(std::string(num(1), 'c'));
    open.set_hostname(std::string(num(2), 'h'));
    open.set_instance(std::string(num(3), 'i'));
    uint64_t id;
    int err = OpenSession(stub.get(), open, &id);
    return err == static_cast<int>(num(4)) ? 0 : Fail("open session: " + std::to_string(err));
  }
  uint64_t session;
  if (int err = OpenSession(stub.get(), open, &session))
    return Fail("open session: " + std::to_string(err));
  if (op == "create-seal") return CreateSeal(stub.get(), session, arg(1), num(2));
  if (op == "mkdir") {
    maru::rpc::MkdirRequest req;
    req.mutable_header()->set_session(session);
    req.mutable_ref()->set_path(arg(1));
    req.set_mode(static_cast<uint32_t>(strtoul(arg(2).c_str(), nullptr, 8)));
    maru::rpc::AttrReply rep;
    int err = Call(stub.get(), &Meta::Stub::Mkdir, req, &rep);
    return err ? Fail("mkdir: " + std::to_string(err)) : 0;
  }
  const int n = static_cast<int>(num(2)), want = static_cast<int>(num(3));
  if (op == "lookup-repeat") return LookupRepeat(stub.get(), session, arg(1), n, want);
  if (op == "open-until") return OpenUntil(stub.get(), session, arg(1), n, want);
  return Fail("unknown command " + op);
}
