#include "fs/fuse_ring.h"

#include <linux/fuse.h>

#include <cerrno>

#include "fs/fuse_loop.h"
#include "util/cpu_wake_latency.h"
#include "util/log.h"
#include "util/mutex.h"

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
// Entries a thread registers at most: one, and one more for each request
// handed to the workers while the kernel held no other (each costs its
// buffers, 1 MiB of address space, touched as far as payloads reach).
constexpr size_t kMaxEntries = 16;
// The io_uring's size: a command for every entry, and the two reads of
// the thread's eventfds.
constexpr unsigned kRingSize = 32;
constexpr uint64_t kStopData = ~0ull;
constexpr uint64_t kDoneData = ~1ull;

}  // namespace

struct FuseRing::Entry {
  RingHeader *header = nullptr;
  uint8_t *region = nullptr;  // kPrefixBytes, then the payload
  iovec iov[2]{};
  uint32_t cmd = kCmdRegister;  // the command last sent for it
  fuse_buf request{};           // the request, as /dev/fuse delivers it
  uint64_t unique = 0;          // of the request being served
  bool replied = false;

  ~Entry();
  int Init();
  uint8_t *payload() const { return region + kPrefixBytes; }
  // Makes `request` of what the kernel put in the entry; false if that does
  // not add up (the reply then says so).
  bool Rebuild();
  // The reply libfuse wrote, into the entry; false if it is not this
  // entry's (a notification).
  bool TakeReply(const iovec *iov, int count);
  void SetReply(int error, uint32_t payload_sz);
  // Processes `request` on this thread, for a reply that is committed next.
  // False if a handler handed it on (only where `may_wait` is false).
  bool Process(fuse_session *se, bool may_wait);
};

struct FuseRing::Queue {
  fuse_session *se = nullptr;
  FuseWorkers *workers = nullptr;
  CpuWakeLatency *wake = nullptr;
  unsigned qid = 0;
  io_uring ring{};
  bool ring_ok = false;
  int stop_fd = -1;
  int done_fd = -1;                             // counts entries the workers have served
  uint64_t stop_count = 0;                      // where the ring reads stop_fd into
  uint64_t done_count = 0;                      // and done_fd
  std::vector<std::unique_ptr<Entry>> entries;  // changed by the thread alone
  size_t waiting = 0;                           // entries the kernel holds, waiting for a request
  Mutex mu;
  std::vector<Entry *> done GUARDED_BY(mu);  // served by workers, their replies to commit
  std::thread thread;

  ~Queue();
  int Init();
  void Run();
  // Registers one more entry; false if it cannot be made.
  bool AddEntry();
  void Send(Entry *e, uint32_t cmd);
  void ReadEventfd(int fd, uint64_t *into, uint64_t data);
  void Serve(Entry *e);
  void HandOff(Entry *e);
  void CommitDone();
};

namespace {

thread_local FuseRing::Entry *t_entry = nullptr;

ssize_t RingWritev(int fd, struct iovec *iov, int count, void *) {
  if (t_entry && t_entry->TakeReply(iov, count)) {
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

bool FuseRing::Serving() {
  return t_entry != nullptr;
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

FuseRing::Entry::~Entry() {
  if (region) munmap(region, kPrefixBytes + kPayloadBytes);
  free(header);
}

int FuseRing::Entry::Init() {
  // aligned_alloc takes a multiple of the alignment.
  constexpr size_t kHeaderBytes = (sizeof(RingHeader) + 63) / 64 * 64;
  header = static_cast<RingHeader *>(aligned_alloc(64, kHeaderBytes));
  void *m = mmap(nullptr, kPrefixBytes + kPayloadBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m != MAP_FAILED) region = static_cast<uint8_t *>(m);
  if (!header || !region) return -ENOMEM;
  memset(header, 0, sizeof(*header));
  iov[0] = {header, sizeof(RingHeader)};
  iov[1] = {payload(), kPayloadBytes};
  return 0;
}

bool FuseRing::Entry::Rebuild() {
  const auto *in = reinterpret_cast<const fuse_in_header *>(header->in_out);
  unique = in->unique;
  replied = false;
  const size_t payload_sz = header->ent.payload_sz;
  // What /dev/fuse delivers: the header, the per-op header (whatever of the
  // length the payload does not take), the payload.
  const size_t fixed = sizeof(fuse_in_header) + payload_sz;
  if (in->len < fixed || in->len - fixed > kOpInSize || payload_sz > kPayloadBytes) {
    LOG_ERROR("ring request %u of %u bytes does not add up", in->opcode, in->len);
    return false;
  }
  const size_t op_sz = in->len - fixed;
  uint8_t *start = payload() - op_sz - sizeof(fuse_in_header);
  memcpy(start, in, sizeof(fuse_in_header));
  memcpy(start + sizeof(fuse_in_header), header->op_in, op_sz);
  request = fuse_buf{};
  request.mem = start;
  request.size = in->len;
  return true;
}

bool FuseRing::Entry::TakeReply(const iovec *v, int count) {
  if (count < 1 || v[0].iov_len < sizeof(fuse_out_header)) return false;
  const auto *out = static_cast<const fuse_out_header *>(v[0].iov_base);
  if (out->unique != unique || replied) return false;
  size_t n = 0;
  for (int i = 1; i < count; ++i) {
    if (n + v[i].iov_len > kPayloadBytes) {
      LOG_ERROR("a reply of more than %zu bytes does not fit the ring", kPayloadBytes);
      return SetReply(-EIO, 0), true;
    }
    memcpy(payload() + n, v[i].iov_base, v[i].iov_len);
    n += v[i].iov_len;
  }
  SetReply(out->error, static_cast<uint32_t>(n));
  return true;
}

void FuseRing::Entry::SetReply(int error, uint32_t payload_sz) {
  auto *out = reinterpret_cast<fuse_out_header *>(header->in_out);
  out->len = static_cast<uint32_t>(sizeof(*out) + payload_sz);
  out->error = error;
  out->unique = unique;
  header->ent.payload_sz = payload_sz;
  replied = true;
}

bool FuseRing::Entry::Process(fuse_session *se, bool may_wait) {
  replied = false;
  t_entry = this;
  bool served = true;
  if (may_wait) {
    fuse_buf copy = request;
    fuse_session_process_buf(se, &copy);
  } else {
    served = ProcessWithoutWaiting(se, request);
  }
  t_entry = nullptr;
  if (served && !replied) {  // no handler of ours does, but the kernel must hear back
    LOG_ERROR("ring request of %zu bytes got no reply before its handler returned", request.size);
    SetReply(-EIO, 0);
  }
  return served;
}

FuseRing::Queue::~Queue() {
  if (ring_ok) io_uring_queue_exit(&ring);
  if (stop_fd >= 0) close(stop_fd);
  if (done_fd >= 0) close(done_fd);
}

int FuseRing::Queue::Init() {
  stop_fd = eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) return -errno;
  done_fd = eventfd(0, EFD_CLOEXEC);
  if (done_fd < 0) return -errno;
  auto first = std::make_unique<Entry>();
  if (int rc = first->Init(); rc < 0) return rc;
  entries.push_back(std::move(first));
  io_uring_params params{};
  params.flags = IORING_SETUP_SQE128;  // the command needs the long SQE
  if (int rc = io_uring_queue_init_params(kRingSize, &ring, &params); rc < 0) return rc;
  ring_ok = true;
  return 0;
}

void FuseRing::Queue::Send(Entry *e, uint32_t cmd) {
  // Never full: a command per entry and two reads at most are in flight.
  io_uring_sqe *sqe = io_uring_get_sqe(&ring);
  *sqe = io_uring_sqe{};
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fuse_session_fd(se);
  sqe->cmd_op = cmd;
  sqe->addr = reinterpret_cast<uint64_t>(e->iov);
  sqe->len = 2;
  io_uring_sqe_set_data(sqe, e);
  // The command lies in the second half of the 128-byte SQE.
  RingCmd rc{};
  rc.commit_id = cmd == kCmdCommitAndFetch ? e->header->ent.commit_id : 0;
  rc.qid = static_cast<uint16_t>(qid);
  memcpy(reinterpret_cast<char *>(sqe) + offsetof(io_uring_sqe, cmd), &rc, sizeof(rc));
  e->cmd = cmd;
  ++waiting;
}

void FuseRing::Queue::ReadEventfd(int fd, uint64_t *into, uint64_t data) {
  io_uring_sqe *sqe = io_uring_get_sqe(&ring);
  io_uring_prep_read(sqe, fd, into, sizeof(*into), 0);
  io_uring_sqe_set_data64(sqe, data);
}

bool FuseRing::Queue::AddEntry() {
  auto e = std::make_unique<Entry>();
  if (e->Init() < 0) return false;
  Send(e.get(), kCmdRegister);
  entries.push_back(std::move(e));
  return true;
}

void FuseRing::Queue::Serve(Entry *e) {
  wake->NoteRequest();
  if (!e->Rebuild()) {
    e->SetReply(-EIO, 0);
    return Send(e, kCmdCommitAndFetch);
  }
  const auto *in = static_cast<const fuse_in_header *>(e->request.mem);
  if (!ServedInline(in->opcode) || !e->Process(se, false)) return HandOff(e);
  Send(e, kCmdCommitAndFetch);
}

void FuseRing::Queue::HandOff(Entry *e) {
  // The kernel gives this CPU's requests to the entries it holds: with none
  // left, they would wait for this one's reply.
  if (waiting == 0 && entries.size() < kMaxEntries && !AddEntry())
    LOG_WARN("fuse ring queue %u: no memory for another entry", qid);
  workers->Push([this, e] {
    e->Process(se, true);
    {
      MutexLock lock(&mu);
      done.push_back(e);
    }
    const uint64_t one = 1;
    (void)!write(done_fd, &one, sizeof(one));
  });
}

void FuseRing::Queue::CommitDone() {
  std::vector<Entry *> served;
  {
    MutexLock lock(&mu);
    served.swap(done);
  }
  for (Entry *e : served) Send(e, kCmdCommitAndFetch);
}

void FuseRing::Queue::Run() {
  // Requests of this CPU come here: serving them on it spares the wake-ups
  // across CPUs. (Where the CPU is not ours to use, the scheduler decides.)
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(qid, &cpus);
  (void)sched_setaffinity(0, sizeof(cpus), &cpus);
  pthread_setname_np(pthread_self(), "maru-ring");  // tests and top find them by it
  Send(entries.front().get(), kCmdRegister);
  ReadEventfd(stop_fd, &stop_count, kStopData);
  ReadEventfd(done_fd, &done_count, kDoneData);
  io_uring_submit(&ring);
  for (;;) {
    io_uring_cqe *cqe;
    int rc = io_uring_wait_cqe(&ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) break;
    const uint64_t data = cqe->user_data;
    const int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    if (data == kStopData) break;
    if (data == kDoneData && res < 0 && res != -EINTR && res != -EAGAIN) {
      LOG_ERROR("fuse ring queue %u: reading its eventfd: %s", qid, strerror(-res));
      break;  // (never seen: it would spin here otherwise)
    }
    if (data == kDoneData) {
      CommitDone();
      ReadEventfd(done_fd, &done_count, kDoneData);
      io_uring_submit(&ring);
      continue;
    }
    auto *e = reinterpret_cast<Entry *>(data);
    --waiting;
    if (res == -EAGAIN || res == -EINTR) {  // not taken: ask again
      Send(e, e->cmd);
    } else if (res == -ENOTCONN || res == -ECONNABORTED) {  // unmounted
      break;
    } else if (res < 0 && e->cmd == kCmdCommitAndFetch) {
      // The kernel took no reply (the request is gone): it holds the entry
      // no more either. Given again, so that this CPU's queue keeps its
      // entries and its requests find one.
      LOG_WARN("fuse ring queue %u: a reply was refused (%s)", qid, strerror(-res));
      Send(e, kCmdRegister);
    } else if (res < 0) {
      // Not registered: the kernel goes on over /dev/fuse until every
      // queue has an entry. (An extra entry that is refused stays unused.)
      LOG_WARN("fuse ring queue %u: %s", qid, strerror(-res));
      if (e == entries.front().get()) break;
    } else {
      Serve(e);
    }
    io_uring_submit(&ring);
  }
}

Result<std::unique_ptr<FuseRing>> FuseRing::Start(fuse_session *se, unsigned per_queue,
                                                  FuseWorkers *workers, CpuWakeLatency *wake) {
  const fuse_custom_io io = {RingWritev, RingRead, nullptr, nullptr};
  if (int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se)); rc < 0)
    return FromReturnCode(rc, "cannot take over the session's I/O");
  std::unique_ptr<FuseRing> r(new FuseRing());
  // The kernel has a queue per possible CPU and uses the ring once each has
  // an entry.
  const unsigned cpus = PossibleCpus();
  for (unsigned q = 0; q < cpus; ++q) {
    for (unsigned i = 0; i < per_queue; ++i) {
      auto queue = std::make_unique<Queue>();
      queue->se = se;
      queue->workers = workers;
      queue->wake = wake;
      queue->qid = q;
      if (int rc = queue->Init(); rc < 0) return FromReturnCode(rc, "cannot set up an io_uring");
      r->queues_.push_back(std::move(queue));
    }
  }
  SignalsBlocked blocked;  // they reach the /dev/fuse loop, which ends the session
  for (auto &q : r->queues_) q->thread = std::thread([p = q.get()] { p->Run(); });
  return r;
}

void FuseRing::Stop() {
  for (auto &q : queues_) {
    const uint64_t one = 1;
    (void)!write(q->stop_fd, &one, sizeof(one));
  }
  for (auto &q : queues_)
    if (q->thread.joinable()) q->thread.join();
}

FuseRing::~FuseRing() {
  Stop();
}

}  // namespace maru

#else  // !MARU_HAVE_LIBURING

namespace maru {

struct FuseRing::Queue {};

bool FuseRingBuilt() {
  return false;
}

bool FuseRing::Serving() {
  return false;
}

void FuseRing::Stop() {}

Result<std::unique_ptr<FuseRing>> FuseRing::Start(fuse_session *, unsigned, FuseWorkers *,
                                                  CpuWakeLatency *) {
  return Status::Error(EOPNOTSUPP, "built without liburing");
}

FuseRing::~FuseRing() = default;

}  // namespace maru

#endif
