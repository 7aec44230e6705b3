// The metadata server's request handlers on arbitrary requests: each input
// is a sequence of (operation, caller, protobuf bytes) records replayed
// against one MetaEngine, the code behind both gRPC and the fast lane.
// Callers are root, an ordinary uid and nobody, each with a live session,
// so requests get past the session check and into the operations.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "fuzz_engine_fixture.h"

namespace {

using namespace maru;

fuzz::EngineFixture *fixture = nullptr;

void Cleanup() {
  if (fixture) fuzz::CloseEngine(fixture);
}

// One record: u8 operation, u8 caller, u16 length, then that many bytes.
struct Reader {
  const uint8_t *p, *end;
  bool Next(uint8_t *op, uint8_t *who, std::string *bytes) {
    if (end - p < 4) return false;
    *op = p[0];
    *who = p[1] % 3;
    size_t len = std::min<size_t>(p[2] | (p[3] << 8), static_cast<size_t>(end - p - 4));
    bytes->assign(reinterpret_cast<const char *>(p + 4), len);
    p += 4 + len;
    return true;
  }
};

template <typename Req, typename Rep, typename Op>
void Run(const std::string &bytes, int who, Op op) {
  Req req;
  if (!req.ParseFromString(bytes)) return;
  // Mostly speak in the caller's own session, sometimes in another's.
  if (req.header().session() == 0) req.mutable_header()->set_session(fixture->sessions[who]);
  Rep rep;
  op(fixture->callers[who], req, &rep);
}

constexpr int kOps = 0
#define MARU_RPC(Name, Req, Rep) +1
#include "meta/rpc_list.inc"
#undef MARU_RPC
    ;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fixture = new fuzz::EngineFixture;
  fuzz::OpenEngine("engine", fixture);
  atexit(Cleanup);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MetaEngine *engine = fixture->engine.get();
  Reader in{data, data + size};
  uint8_t op, who;
  std::string bytes;
  while (in.Next(&op, &who, &bytes)) {
    const int pick = op % kOps;
    int index = 0;
#define MARU_RPC(Name, Req, Rep)                                                               \
  if (pick == index++)                                                                         \
    Run<rpc::Req, rpc::Rep>(bytes, who, [&](const Caller &c, const rpc::Req &r, rpc::Rep *o) { \
      engine->Name(c, r, o);                                                                   \
    });
#include "meta/rpc_list.inc"
#undef MARU_RPC
  }
  engine->Tick();
  return 0;
}
