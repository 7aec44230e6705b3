// maru-bench ucx: UCX's own get and put bandwidth between two processes on
// this host, over the transport UCX_TLS selects, with the UCX settings
// maru-agent and libmaru_direct use (UcxWorker). It is the ceiling for
// remote loads and stores: ucx_perftest does the same, but Debian ships it
// in a package of its own (ucx-utils) that is not installed here.
//
// The target (a forked process) registers a buffer and progresses its worker;
// the initiator moves SIZE bytes per round, once as one request and once
// as fragments all in flight, and keeps the faster.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "bench/common.h"
#include "common/json_output.h"
#include "rdma/ucx_worker.h"
#include "util/clock.h"
#include "util/units.h"

namespace maru::bench {
namespace {

constexpr uint64_t kFragment = 4ull << 20;

// What the target tells the initiator through a pipe.
struct Offer {
  uint16_t port = 0;
  uint64_t base = 0;
  uint32_t rkey_bytes = 0;
  uint8_t rkey[1024];
};

bool WriteAll(int fd, const void *p, size_t n) {
  return write(fd, p, n) == static_cast<ssize_t>(n);
}

bool ReadAll(int fd, void *p, size_t n) {
  auto *at = static_cast<uint8_t *>(p);
  while (n) {
    ssize_t got = read(fd, at, n);
    if (got <= 0) return false;
    at += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// A registered, touched buffer of `size` bytes.
struct Registered {
  std::vector<uint8_t> bytes;
  ucp_mem_h memh = nullptr;
  ucp_context_h context = nullptr;
  ~Registered() {
    if (memh) ucp_mem_unmap(context, memh);
  }
  bool Map(ucp_context_h c, uint64_t size, uint8_t seed) {
    bytes = TouchedBuffer(size, seed);
    context = c;
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = bytes.data();
    mp.length = bytes.size();
    return ucp_mem_map(c, &mp, &memh) == UCS_OK;
  }
};

// The target: serves gets and puts on its buffer until `stop` is readable.
int Target(uint64_t size, int offer_fd, int stop_fd) {
  Result<std::unique_ptr<UcxWorker>> ucx = UcxWorker::Create();
  if (!ucx.ok()) return 1;
  Registered buf;
  if (!buf.Map((*ucx)->context(), size, 3)) return 1;
  Offer offer;
  void *packed = nullptr;
  size_t packed_size = 0;
  if (ucp_rkey_pack((*ucx)->context(), buf.memh, &packed, &packed_size) != UCS_OK ||
      packed_size > sizeof(offer.rkey))
    return 1;
  memcpy(offer.rkey, packed, packed_size);
  offer.rkey_bytes = static_cast<uint32_t>(packed_size);
  ucp_rkey_buffer_release(packed);
  offer.base = reinterpret_cast<uint64_t>(buf.bytes.data());
  std::vector<ucp_ep_h> eps;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<sockaddr *>(&sa);
  lp.sockaddr.addrlen = sizeof(sa);
  struct Accept {
    ucp_worker_h worker;
    std::vector<ucp_ep_h> *eps;
  } accept{(*ucx)->worker(), &eps};
  lp.conn_handler.arg = &accept;
  lp.conn_handler.cb = [](ucp_conn_request_h request, void *arg) {
    auto *a = static_cast<Accept *>(arg);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.conn_request = request;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;  // as maru-agent's endpoints
    // The initiator going away ends the run; nothing to do about it.
    ep.err_handler.cb = [](void *, ucp_ep_h, ucs_status_t) {};
    ucp_ep_h h;
    if (ucp_ep_create(a->worker, &ep, &h) == UCS_OK) a->eps->push_back(h);
  };
  ucp_listener_h listener;
  if (ucp_listener_create((*ucx)->worker(), &lp, &listener) != UCS_OK) return 1;
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (ucp_listener_query(listener, &attr) != UCS_OK) return 1;
  offer.port = ntohs(reinterpret_cast<sockaddr_in *>(&attr.sockaddr)->sin_port);
  if (!WriteAll(offer_fd, &offer, sizeof(offer))) return 1;
  // Progressed as maru-agent's worker is: until idle, then asleep until
  // the network wakes it. (A target that spins, as ucx_perftest's does,
  // starves the initiator on a small, busy host: it measured slower.)
  for (;;) {
    pollfd p{stop_fd, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) break;
    (*ucx)->Progress();
    (*ucx)->Sleep(100);
  }
  ucp_listener_destroy(listener);
  for (ucp_ep_h ep : eps) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    (*ucx)->Wait(ucp_ep_close_nbx(ep, &p), 1000);
  }
  return 0;
}

// Moves `size` bytes between `local` and the target in `fragment`-sized
// requests, all in flight at once; the GB/s, or a negative errno.
double Move(UcxWorker &ucx, ucp_ep_h ep, ucp_rkey_h rkey, const Offer &offer, Registered &local,
            uint64_t size, uint64_t fragment, bool put) {
  const int64_t t0 = MonotonicNs();
  std::vector<void *> requests;
  for (uint64_t at = 0; at < size; at += fragment) {
    const uint64_t n = std::min(fragment, size - at);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
    p.memh = local.memh;
    requests.push_back(
        put ? ucp_put_nbx(ep, local.bytes.data() + at, n, offer.base + at, rkey, &p)
            : ucp_get_nbx(ep, local.bytes.data() + at, n, offer.base + at, rkey, &p));
  }
  if (put) {
    ucp_request_param_t p{};
    requests.push_back(ucp_ep_flush_nbx(ep, &p));
  }
  for (void *r : requests)
    if (ucs_status_t st = ucx.Wait(r, 30000); st != UCS_OK) return -UcsErrno(st);
  return static_cast<double>(size) / static_cast<double>(MonotonicNs() - t0);
}

}  // namespace

int RunUcx(int argc, char **argv) {
  uint64_t size = 32ull << 20;
  int64_t rounds = 8;
  bool json = false;
  Flags flags("maru-bench ucx [--size SIZE] [--rounds N] [--json]",
              "UCX's own get and put bandwidth to a process on this host (set UCX_TLS, e.g.\n"
              "UCX_TLS=tcp): the ceiling of remote loads and stores through maru-agent.");
  flags.Size("size", &size, "bytes per transfer");
  flags.Int("rounds", &rounds, "transfers of each kind");
  flags.Bool("json", &json, "end with one JSON line of the figures");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  if (size == 0 || size > (4ull << 30) || rounds <= 0)
    return Fail("need --size up to 4G and --rounds > 0");

  int offer_pipe[2], stop_pipe[2];
  if (pipe2(offer_pipe, O_CLOEXEC) < 0 || pipe2(stop_pipe, O_CLOEXEC) < 0)
    return Fail("cannot make pipes");
  const pid_t child = fork();
  if (child < 0) return Fail("cannot fork");
  if (child == 0) {
    close(offer_pipe[0]);
    close(stop_pipe[1]);
    _exit(Target(size, offer_pipe[1], stop_pipe[0]));
  }
  close(offer_pipe[1]);
  close(stop_pipe[0]);
  // Whatever happens, the target is told to stop and reaped.
  struct Reaper {
    pid_t pid;
    int stop;
    ~Reaper() {
      close(stop);
      int status;
      waitpid(pid, &status, 0);
    }
  } reaper{child, stop_pipe[1]};
  Offer offer;
  const bool offered = ReadAll(offer_pipe[0], &offer, sizeof(offer));
  close(offer_pipe[0]);
  if (!offered) return Fail("the UCX target did not start");

  Result<std::unique_ptr<UcxWorker>> ucx = UcxWorker::Create();
  if (!ucx.ok()) return Fail(ucx.status().ToString());
  Registered local;
  if (!local.Map((*ucx)->context(), size, 4)) return Fail("cannot register the local buffer");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(offer.port);
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                         UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;  // as RemotePool's endpoints
  ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep_params.sockaddr.addr = reinterpret_cast<sockaddr *>(&sa);
  ep_params.sockaddr.addrlen = sizeof(sa);
  ucp_ep_h ep;
  if (ucp_ep_create((*ucx)->worker(), &ep_params, &ep) != UCS_OK)
    return Fail("cannot connect to the UCX target");
  ucp_rkey_h rkey;
  if (ucp_ep_rkey_unpack(ep, offer.rkey, &rkey) != UCS_OK) return Fail("bad remote key");

  std::vector<double> get_one, get_frag, put_one, put_frag;
  Move(**ucx, ep, rkey, offer, local, size, size, false);  // wires the connection up
  double worst = 0;
  // Gets, then puts, as a remote load and a store come one after the other.
  for (int64_t r = 0; r < rounds; ++r) {
    get_one.push_back(Move(**ucx, ep, rkey, offer, local, size, size, false));
    get_frag.push_back(Move(**ucx, ep, rkey, offer, local, size, kFragment, false));
    worst = std::min({worst, get_one.back(), get_frag.back()});
  }
  for (int64_t r = 0; r < rounds; ++r) {
    put_one.push_back(Move(**ucx, ep, rkey, offer, local, size, size, true));
    put_frag.push_back(Move(**ucx, ep, rkey, offer, local, size, kFragment, true));
    worst = std::min({worst, put_one.back(), put_frag.back()});
  }
  ucp_rkey_destroy(rkey);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  (*ucx)->Wait(ucp_ep_close_nbx(ep, &p), 1000);
  if (worst < 0)
    return Fail(std::string("a transfer failed: ") + strerror(static_cast<int>(-worst)));
  // Medians of each kind, and the best round: on a loaded host the median
  // moves with the load, the best is what the transport can do.
  const double g1 = Quantile(get_one, 0.5), gf = Quantile(get_frag, 0.5),
               p1 = Quantile(put_one, 0.5), pf = Quantile(put_frag, 0.5);
  const double gbest = std::max(Quantile(get_one, 1), Quantile(get_frag, 1)),
               pbest = std::max(Quantile(put_one, 1), Quantile(put_frag, 1));
  const char *tls = getenv("UCX_TLS");
  printf(
      "UCX (%s) %s: get %.2f GB/s (one request) / %.2f (4 MiB fragments), best %.2f; "
      "put %.2f / %.2f, best %.2f\n",
      tls ? tls : "default transports", FormatSize(size).c_str(), g1, gf, gbest, p1, pf, pbest);
  if (json)
    PrintJson({{"size", size},
               {"get_gbps", Rounded(std::max(g1, gf), 3)},
               {"put_gbps", Rounded(std::max(p1, pf), 3)},
               {"get_best_gbps", Rounded(gbest, 3)},
               {"put_best_gbps", Rounded(pbest, 3)},
               {"get_one_gbps", Rounded(g1, 3)},
               {"get_fragments_gbps", Rounded(gf, 3)},
               {"put_one_gbps", Rounded(p1, 3)},
               {"put_fragments_gbps", Rounded(pf, 3)}});
  return 0;
}

}  // namespace maru::bench
