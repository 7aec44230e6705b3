#include "fs/fuse_ring.h"

#include <linux/fuse.h>

#include <cerrno>

#include "fs/fuse_loop.h"
#include "util/log.h"

#ifdef MARU_HAVE_LIBURING

#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace maru {
namespace {

// The ring's ABI (<linux/fuse.h> 7.42; Debian 12's header is 7.38).
constexpr uint32_t kCmdRegister = 1;
constexpr uint32_t kCmdCommitAndFetch = 2;
constexpr size_t kOpInSize = 128;

struct RingEntInOut {
  uint64_t flags;
  uint64_t commit_id;  // names the request in its commit
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};

struct RingHeader {
  char in_out[128];       // fuse_in_header in, fuse_out_header out
  char op_in[kOpInSize];  // the per-op header (fuse_read_in, ...)
  RingEntInOut ent;
};

struct RingCmd {  // in the SQE's command area
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};

// The largest payload of a request or reply: maru-fuse asks for 1 MiB
// writes (MaruFs::Init), and libfuse sets max_pages to match.
constexpr size_t kPayloadBytes = 1 << 20;
// Room before the payload for the headers that make the request a
// /dev/fuse one again, so that a write's data is never moved.
constexpr size_t kPrefixBytes = 4096;
constexpr uint64_t kStopData = ~0ull;

}  // namespace

struct FuseRing::Queue {
  fuse_session *se = nullptr;
  unsigned qid = 0;
  io_uring ring{};
  bool ring_ok = false;
  int stop_fd = -1;
  RingHeader *header = nullptr;
  uint8_t *region = nullptr;  // kPrefixBytes, then the payload
  iovec iov[2]{};
  uint64_t unique = 0;  // of the request being served
  bool replied = false;
  std::thread thread;

  ~Queue();
  int Init();
  void Run();
  uint8_t *payload() const { return region + kPrefixBytes; }
  void PrepCmd(uint32_t op, uint64_t commit_id);
  void Serve();
  void Commit(int error, uint32_t payload_sz);
  // The reply libfuse wrote, into the entry; false if it is not this
  // entry's (a notification).
  bool TakeReply(const iovec *iov, int count);
};

namespace {

thread_local FuseRing::Queue *t_queue = nullptr;

ssize_t RingWritev(int fd, struct iovec *iov, int count, void *) {
  if (t_queue && t_queue->TakeReply(iov, count)) {
    size_t n = 0;
    for (int i = 0; i < count; ++i) n += iov[i].iov_len;
    return static_cast<ssize_t>(n);
  }
  return writev(fd, iov, count);
}

ssize_t RingRead(int fd, void *buf, size_t len, void *) {
  return read(fd, buf, len);
}

}  // namespace

bool FuseRingBuilt() {
  return true;
}

namespace {

// The kernel's num_possible_cpus(): one past the last CPU of "0-3,8-11".
unsigned PossibleCpus() {
  FILE *f = fopen("/sys/devices/system/cpu/possible", "re");
  char line[256] = "";
  const bool read = f && fgets(line, sizeof(line), f);
  if (f) fclose(f);
  unsigned last = 0;
  bool any = false;
  for (const char *p = line; read;) {
    char *end;
    const unsigned long n = strtoul(p, &end, 10);
    if (end == p) break;
    last = static_cast<unsigned>(n);
    any = true;
    if (*end != '-' && *end != ',') break;
    p = end + 1;
  }
  return any ? last + 1 : static_cast<unsigned>(get_nprocs_conf());
}

}  // namespace

FuseRing::Queue::~Queue() {
  if (ring_ok) io_uring_queue_exit(&ring);
  if (stop_fd >= 0) close(stop_fd);
  if (region) munmap(region, kPrefixBytes + kPayloadBytes);
  free(header);
}

int FuseRing::Queue::Init() {
  stop_fd = eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) return -errno;
  header = static_cast<RingHeader *>(aligned_alloc(64, sizeof(RingHeader)));
  void *m = mmap(nullptr, kPrefixBytes + kPayloadBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!header || m == MAP_FAILED) return -ENOMEM;
  region = static_cast<uint8_t *>(m);
  memset(header, 0, sizeof(*header));
  iov[0] = {header, sizeof(RingHeader)};
  iov[1] = {payload(), kPayloadBytes};
  io_uring_params params{};
  params.flags = IORING_SETUP_SQE128;  // the command needs the long SQE
  if (int rc = io_uring_queue_init_params(4, &ring, &params); rc < 0) return rc;
  ring_ok = true;
  return 0;
}

void FuseRing::Queue::PrepCmd(uint32_t op, uint64_t commit_id) {
  io_uring_sqe *sqe = io_uring_get_sqe(&ring);  // never full: one entry in flight
  *sqe = io_uring_sqe{};
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fuse_session_fd(se);
  sqe->cmd_op = op;
  sqe->addr = reinterpret_cast<uint64_t>(iov);
  sqe->len = 2;
  // The command lies in the second half of the 128-byte SQE.
  RingCmd cmd{};
  cmd.commit_id = commit_id;
  cmd.qid = static_cast<uint16_t>(qid);
  memcpy(reinterpret_cast<char *>(sqe) + offsetof(io_uring_sqe, cmd), &cmd, sizeof(cmd));
}

bool FuseRing::Queue::TakeReply(const iovec *v, int count) {
  if (count < 1 || v[0].iov_len < sizeof(fuse_out_header)) return false;
  const auto *out = static_cast<const fuse_out_header *>(v[0].iov_base);
  if (out->unique != unique || replied) return false;
  size_t n = 0;
  for (int i = 1; i < count; ++i) {
    if (n + v[i].iov_len > kPayloadBytes) {
      LOG_ERROR("a reply of more than %zu bytes does not fit the ring", kPayloadBytes);
      replied = true;
      return Commit(-EIO, 0), true;
    }
    memcpy(payload() + n, v[i].iov_base, v[i].iov_len);
    n += v[i].iov_len;
  }
  replied = true;
  Commit(out->error, static_cast<uint32_t>(n));
  return true;
}

void FuseRing::Queue::Commit(int error, uint32_t payload_sz) {
  auto *out = reinterpret_cast<fuse_out_header *>(header->in_out);
  out->len = static_cast<uint32_t>(sizeof(*out) + payload_sz);
  out->error = error;
  out->unique = unique;
  header->ent.payload_sz = payload_sz;
  PrepCmd(kCmdCommitAndFetch, header->ent.commit_id);
}

void FuseRing::Queue::Serve() {
  const auto *in = reinterpret_cast<const fuse_in_header *>(header->in_out);
  unique = in->unique;
  replied = false;
  const size_t payload_sz = header->ent.payload_sz;
  // What /dev/fuse delivers: the header, the per-op header (whatever of the
  // length the payload does not take), the payload.
  const size_t fixed = sizeof(fuse_in_header) + payload_sz;
  if (in->len < fixed || in->len - fixed > kOpInSize || payload_sz > kPayloadBytes) {
    LOG_ERROR("ring request %u of %u bytes does not add up", in->opcode, in->len);
    replied = true;
    return Commit(-EIO, 0);
  }
  const size_t op_sz = in->len - fixed;
  uint8_t *start = payload() - op_sz - sizeof(fuse_in_header);
  memcpy(start, in, sizeof(fuse_in_header));
  memcpy(start + sizeof(fuse_in_header), header->op_in, op_sz);
  fuse_buf buf{};
  buf.mem = start;
  buf.size = in->len;
  t_queue = this;
  fuse_session_process_buf(se, &buf);
  t_queue = nullptr;
  if (!replied) {  // no handler of ours does, but the kernel must hear back
    LOG_ERROR("ring request %u got no reply before its handler returned", in->opcode);
    replied = true;
    Commit(-EIO, 0);
  }
}

void FuseRing::Queue::Run() {
  // Requests of this CPU come here: serving them on it spares the wake-ups
  // across CPUs. (Where the CPU is not ours to use, the scheduler decides.)
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(qid, &cpus);
  (void)sched_setaffinity(0, sizeof(cpus), &cpus);
  pthread_setname_np(pthread_self(), "maru-ring");  // tests and top find them by it
  PrepCmd(kCmdRegister, 0);
  io_uring_sqe *stop = io_uring_get_sqe(&ring);
  io_uring_prep_poll_add(stop, stop_fd, POLLIN);
  io_uring_sqe_set_data64(stop, kStopData);
  io_uring_submit(&ring);
  uint32_t last = kCmdRegister;
  for (;;) {
    io_uring_cqe *cqe;
    int rc = io_uring_wait_cqe(&ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) break;
    const uint64_t data = cqe->user_data;
    const int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    if (data == kStopData) break;
    if (res == -EAGAIN || res == -EINTR) {  // not taken: ask again
      PrepCmd(last, header->ent.commit_id);
    } else if (res == -ENOTCONN || res == -ECONNABORTED) {  // unmounted
      break;
    } else if (res < 0 && last == kCmdCommitAndFetch) {
      // The kernel took no reply (the request is gone): it holds the entry
      // no more either. Given again, so that this CPU's queue keeps its
      // entries and its requests find one.
      LOG_WARN("fuse ring queue %u: a reply was refused (%s)", qid, strerror(-res));
      PrepCmd(kCmdRegister, 0);
      last = kCmdRegister;
    } else if (res < 0) {
      // Not registered: the kernel goes on over /dev/fuse until every
      // queue has an entry.
      LOG_WARN("fuse ring queue %u: %s", qid, strerror(-res));
      break;
    } else {
      Serve();
      last = kCmdCommitAndFetch;
    }
    io_uring_submit(&ring);
  }
}

Result<std::unique_ptr<FuseRing>> FuseRing::Start(fuse_session *se, unsigned per_queue) {
  const fuse_custom_io io = {RingWritev, RingRead, nullptr, nullptr};
  if (int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se)); rc < 0)
    return Status::Error(-rc, "cannot take over the session's I/O");
  std::unique_ptr<FuseRing> r(new FuseRing());
  // The kernel has a queue per possible CPU and uses the ring once each has
  // an entry.
  const unsigned cpus = PossibleCpus();
  for (unsigned q = 0; q < cpus; ++q) {
    for (unsigned i = 0; i < per_queue; ++i) {
      auto queue = std::make_unique<Queue>();
      queue->se = se;
      queue->qid = q;
      if (int rc = queue->Init(); rc < 0) return Status::Error(-rc, "cannot set up an io_uring");
      r->queues_.push_back(std::move(queue));
    }
  }
  SignalsBlocked blocked;  // they reach the /dev/fuse loop, which ends the session
  for (auto &q : r->queues_) q->thread = std::thread([p = q.get()] { p->Run(); });
  return r;
}

FuseRing::~FuseRing() {
  for (auto &q : queues_) {
    const uint64_t one = 1;
    (void)!write(q->stop_fd, &one, sizeof(one));
  }
  for (auto &q : queues_)
    if (q->thread.joinable()) q->thread.join();
}

}  // namespace maru

#else  // !MARU_HAVE_LIBURING

namespace maru {

struct FuseRing::Queue {};

bool FuseRingBuilt() {
  return false;
}

Result<std::unique_ptr<FuseRing>> FuseRing::Start(fuse_session *, unsigned) {
  return Status::Error(EOPNOTSUPP, "built without liburing");
}

FuseRing::~FuseRing() = default;

}  // namespace maru

#endif
