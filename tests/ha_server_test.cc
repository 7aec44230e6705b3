// Servers that do not lead, and a pool that fenced a server out, as clients
// meet them: real MetaEngines behind real MetaServices on Unix sockets, each
// with a LeaderGate that the test flips as an election would
// (ha/leadership.h does it in maru-server), and a real MetaClient with the
// list of servers.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>

#include "alloc/pool_device.h"
#include "client/meta_client.h"
#include "ha/leader_gate.h"
#include "harness.h"
#include "meta/acceptor.h"
#include "meta/identity.h"
#include "meta/meta_engine.h"
#include "meta/meta_service.h"

namespace maru {
namespace {

// A maru-server's RPC layer in this process: engine, service, gate.
class GatedServer {
 public:
  // The servers of one pool (a client refuses to resume with a server of
  // another). Without the shared index: two live engines would each claim
  // the pool's index region.
  explicit GatedServer(const std::string &pool) {
    EngineOptions options;
    options.pool_paths = {pool};
    options.index = false;
    options.db_dir = dir_.path() + "/db";
    options.grace_ms = 0;
    Result<std::unique_ptr<MetaEngine>> e = MetaEngine::Open(options);
    if (!e.ok()) return;
    engine_ = std::move(*e);
    service_ = std::make_unique<MetaService>(engine_.get(), &peers_, IdentityPolicy{});
    service_->set_leader_gate(&gate_);
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    Result<std::unique_ptr<Acceptor>> l = Acceptor::ListenUnix(socket());
    if (!l.ok()) return;
    acceptor_ = std::move(*l);
    acceptor_->Start(
        [this](int conn) {
          std::optional<PeerCredentials> creds = ReadPeerCredentials(conn);
          if (!creds) return (void)close(conn);
          peers_.Set(conn, *creds);
          grpc::AddInsecureChannelFromFd(server_.get(), conn);
        },
        /*nonblocking=*/true);
  }
  ~GatedServer() {
    if (acceptor_) acceptor_->Stop();
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }
  bool ok() const { return server_ && acceptor_; }
  std::string socket() const { return dir_.path() + "/maru.sock"; }
  std::string address() const { return "unix://" + socket(); }
  LeaderGate &gate() { return gate_; }

 private:
  maru_test::TempDir dir_;
  std::unique_ptr<MetaEngine> engine_;
  PeerRegistry peers_;
  LeaderGate gate_;
  std::unique_ptr<MetaService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Acceptor> acceptor_;
};

int Statfs(MetaClient *c) {
  rpc::StatfsRequest req;
  rpc::StatfsReply rep;
  return c->Call(&MetaClient::Stub::Statfs, req, &rep);
}

ClientOptions Quick() {
  ClientOptions o;
  o.retry_window_ms = 5000;
  return o;
}

TEST(HaServerTest, AServerThatDoesNotLeadNamesTheLeader) {
  maru_test::TestPool pool(64ull << 20);
  GatedServer standby(pool.path());
  ASSERT_TRUE(standby.ok());
  standby.gate().Follow("unix:///run/maru/leader.sock");
  auto channel = grpc::CreateChannel(standby.address(), grpc::InsecureChannelCredentials());
  auto stub = rpc::Meta::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  rpc::StatfsRequest req;
  rpc::StatfsReply rep;
  grpc::Status s = stub->Statfs(&ctx, req, &rep);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "maru-server: not the leader; the leader is unix:///run/maru/leader.sock");
}

TEST(HaServerTest, ClientsSkipAndLeaveServersThatDoNotLead) {
  maru_test::TestPool pool(64ull << 20);
  GatedServer a(pool.path()), b(pool.path());
  ASSERT_TRUE(a.ok() && b.ok());
  a.gate().Follow(b.address());
  b.gate().Lead(1);
  // The first of the list does not lead: the client opens its session with
  // the second.
  auto client = MetaClient::Connect(a.address() + "," + b.address(), Quick());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ((*client)->current_address(), b.address());
  EXPECT_EQ((*client)->session_info().leader_epoch(), 1u);
  ASSERT_EQ(Statfs(client->get()), 0);

  // Leadership moves: the next call goes to the new leader and resumes the
  // session there.
  b.gate().Follow(a.address());
  a.gate().Lead(2);
  ASSERT_EQ(Statfs(client->get()), 0);
  EXPECT_EQ((*client)->current_address(), a.address());
  EXPECT_EQ((*client)->session_info().leader_epoch(), 2u);
}

TEST(HaServerTest, ClientsRefuseAServerThePoolFencedOut) {
  maru_test::TestPool pool(64ull << 20);
  GatedServer old_leader(pool.path()), new_leader(pool.path());
  ASSERT_TRUE(old_leader.ok() && new_leader.ok());
  // Both still answer, as a deposed leader that has not noticed would.
  old_leader.gate().Lead(4);
  new_leader.gate().Lead(5);
  auto client = MetaClient::Connect(old_leader.address() + "," + new_leader.address(), Quick());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ((*client)->current_address(), old_leader.address());

  // The pool the client maps says epoch 5 leads.
  auto device = PoolDevice::Open(pool.path(), PoolDevice::OpenOptions());
  ASSERT_TRUE(device.ok());
  auto control = PoolControl::At((*device)->base(), (*device)->superblock());
  ASSERT_TRUE(control.ok());
  ASSERT_TRUE(control->RaiseFence(5).ok());
  (*client)->set_pool_control(*control);
  ASSERT_EQ(Statfs(client->get()), 0);
  EXPECT_EQ((*client)->current_address(), new_leader.address());
  EXPECT_EQ((*client)->session_info().leader_epoch(), 5u);
}

}  // namespace
}  // namespace maru
