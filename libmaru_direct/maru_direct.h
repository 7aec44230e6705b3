/*
 * libmaru_direct: store and load KV-cache chunks in a shared Maru pool with
 * plain memory access.
 *
 * A chunk is a file in the Maru namespace ("/llama/abc" here is the file
 * MOUNT/llama/abc of a mounted maru-fuse). Its bytes live in pool memory
 * that every process on the host (or behind the CXL switch) maps; only
 * metadata travels to maru-server. maru_chunk_data() points straight into
 * that shared mapping: a chunk one process stores is read by another with
 * no copy.
 *
 * Rules of the pool:
 *  - Write, then publish. maru_create() reserves space only this chunk
 *    handle may write; maru_seal() publishes it. Until sealed, no one else
 *    can open it (-EBUSY). First writer wins: creating an existing or
 *    in-progress path fails with -EEXIST.
 *  - Sealed chunks are immutable. A chunk handle holds a lease: the bytes
 *    it points to are never reused for anything else until it is released,
 *    even if the file is unlinked, replaced or evicted meanwhile.
 *  - A process that dies or stops heartbeating loses its leases and its
 *    unsealed reservations (after the server's session timeout).
 *
 * Errors: functions returning int return 0 or a negative errno.
 *   -EINVAL        bad argument or path (relative, empty, "." or ".."
 *                  component), size 0
 *   -ENAMETOOLONG  a path component over 255 bytes, or a path over 4095
 *   -ENOENT        no such chunk or directory
 *   -EEXIST        the path exists or is being written
 *   -EBUSY         the chunk is being written and not sealed yet
 *   -EACCES/-EPERM permissions (checked against the caller's uid/gid)
 *   -ENOSPC        the pool is full and nothing can be evicted
 *   -EFBIG         the chunk is larger than any pool device
 *   -ENOTCONN      the server is unreachable (after waiting for it to come
 *                  back, MARU_RETRY_MS, default 30000)
 *   -ECONNREFUSED  no server at the address when connecting
 *   -ECONNRESET    the pool's maru-agent went away mid-transfer
 *   -EROFS         this process may only read the pool (no write
 *                  permission on the pool device)
 *   -ESTALE        the chunk's lease or reservation was lost (the session
 *                  expired, or the server restarted and could not renew it)
 *
 * Threads and processes: a maru_t may be shared by any number of threads.
 * A maru_chunk_t belongs to one thread at a time, except that
 * maru_wait_part() may run beside reads of the same handle (maru_read_into
 * and the batches) on other threads. Async batches run on one worker thread
 * per maru_t (see maru_read_into_batch_async()); their futures may be used
 * from any thread. Handles do not survive
 * fork(), and a child forked after maru_connect() must exec before it uses
 * the library (the RPC runtime shares its event loop with the parent until
 * then); multiprocessing "spawn" and fork+exec are fine. Any number of
 * processes may connect to the same server.
 *
 * Where the server publishes its shared-memory index (the default: in the
 * pool's own region, found by every process that maps the pool, over a
 * Unix socket or TCP; for a pool without one, a file next to the pool that
 * only clients of a local server read), maru_open(), maru_lookup_prefix(),
 * maru_count_prefix() and maru_release() of a sealed chunk send no message:
 * the lease is a slot in shared memory the server scans before it reuses
 * extents. They answer as the server would (same errors, same permission
 * rules) and ask the server whenever the index cannot decide.
 * MARU_INDEX=0 in the environment turns this off.
 *
 * Hosts that cannot map the pool (no CXL) reach it through maru-agent: over
 * UCX one-sided get/put on RDMA, over requests the agent checks against the
 * grant on TCP. The same calls work; maru_create() hands out a
 * local staging buffer that maru_seal() writes to the pool, and reads fetch
 * into a local copy or, with maru_read_into(), straight into the caller's
 * buffer. A remote read is reported -ESTALE, never silently stale, if the
 * lease may have lapsed while the bytes moved; -ECONNRESET if the agent went
 * away (the next call reconnects).
 *
 * Environment: MARU_SERVER (the default target when maru_connect gets NULL),
 * MARU_DATA=remote (use the agents even where the pool is visible),
 * MARU_POPULATE=0|1 (prefault the pool mapping at connect: never, always; see
 * maru_connect_opts), MARU_STREAM_WRITES=0 (maru_write_from() and
 * maru_write_from_batch() copy with plain stores, see there),
 * MARU_TIMEOUT_MS (one call's deadline, default 10000), MARU_RETRY_MS.
 */
#ifndef MARU_DIRECT_H
#define MARU_DIRECT_H

#include <errno.h> /* the E* codes the functions return, negated */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct maru maru_t;
typedef struct maru_chunk maru_chunk_t;

/* --- Connections -------------------------------------------------------- */

/* Connects to maru-server at "unix:///path" or "tcp://host:port" (NULL:
 * $MARU_SERVER, else unix:///run/maru/maru.sock), opens a session and maps
 * the pool, once for the whole process. A comma-separated list names the
 * servers of one pool (a leader and its standbys): the client uses the one
 * that leads, and moves to the next, resuming its session, when it dies or
 * stops leading. */
int maru_connect(const char *target, maru_t **out);

typedef struct maru_connect_opts {
  const char *instance; /* this client's name ("vllm-0"), shown by maructl
                         * sessions, marutop and /metrics; NULL for none;
                         * at most 64 bytes (-ENAMETOOLONG), printable
                         * (control characters: -EINVAL) */
  int populate;         /* enum maru_populate: whether the pool mapping is
                         * prefaulted at connect, so loads and stores never
                         * take a page fault */
} maru_connect_opts_t;

enum maru_populate {
  /* $MARU_POPULATE if set (0: never, 1: always), else prefault a device of
   * at most 16 GiB whose memory is allocated (devdax, a pool file formatted
   * without --sparse): prefaulting a sparse pool file allocates its memory,
   * and a large device costs every client time and page tables. */
  MARU_POPULATE_AUTO = 0,
  MARU_POPULATE_NEVER = 1,  /* pages are faulted in as they are touched */
  MARU_POPULATE_ALWAYS = 2, /* the whole pool, whatever its size */
};

/* maru_connect() with options; `opts` may be NULL. */
int maru_connect_ex(const char *target, const maru_connect_opts_t *opts, maru_t **out);

/* Releases every lease, aborts unsealed chunks, closes the session and
 * unmaps the pool. Chunk handles of `m` must not be used afterwards. */
void maru_disconnect(maru_t *m);

/* --- Storing ------------------------------------------------------------ */

/* Reserves `size` bytes for a new chunk at absolute `path`, creating
 * missing parent directories. Fill maru_chunk_data(*out), then maru_seal(),
 * or maru_release() to abandon it. */
int maru_create(maru_t *m, const char *path, uint64_t size, maru_chunk_t **out);

enum maru_checksum { MARU_CHECKSUM_NONE = 0, MARU_CHECKSUM_XXH3 = 1, MARU_CHECKSUM_CRC32C = 2 };

typedef struct maru_create_opts {
  uint32_t mode;      /* permission bits; 0 means 0644 */
  const char *parent; /* the chunk this one extends (a prefix chain), or NULL */
  int checksum;       /* enum maru_checksum, computed at seal */
  uint32_t flags;     /* MARU_CREATE_* */
  uint32_t parts;     /* layer-wise: 0 or 1 = one part; N > 1 = published in
                       * N equal parts (size % N == 0 and N <= MARU_PARTS_MAX,
                       * else -EINVAL); see maru_publish_part() */
} maru_create_opts_t;

/* One extent: maru_chunk_data() then points inside a region that
 * maru_pool_regions() lists. Without it a chunk may be split over several
 * extents when no free run fits it, and its bytes are then shown through a
 * private view of this process. -ENOSPC if no free run fits (eviction
 * makes room when the pool is full; it does not defragment). Other flags:
 * -EINVAL. */
#define MARU_CREATE_CONTIGUOUS 0x1u

/* maru_create() with options; `opts` may be NULL. */
int maru_create_ex(maru_t *m, const char *path, uint64_t size, const maru_create_opts_t *opts,
                   maru_chunk_t **out);

/* maru_create() of a chunk that extends the chunk at `parent`: eviction
 * takes the tails of such chains first, and the whole tail with a prefix. */
int maru_create_child(maru_t *m, const char *path, const char *parent, uint64_t size,
                      maru_chunk_t **out);

/* Publishes a chunk created by this handle. Afterwards the handle is a
 * read handle (with a lease) until maru_release(). */
int maru_seal(maru_chunk_t *c);

/* The most requests one batched call takes; more is -E2BIG and nothing is
 * done. For every batched call: n == 0 does nothing and returns 0; a path
 * (or chunk) named twice in one batch gets -EEXIST the second time. */
#define MARU_BATCH_MAX 4096

typedef struct maru_create_req {
  const char *path;    /* in: absolute path of the new chunk */
  uint64_t size;       /* in: bytes */
  const char *parent;  /* in: the chunk this one extends, or NULL */
  maru_chunk_t *chunk; /* out: the writable handle, or NULL */
  int result;          /* out: 0 or a negative errno for this chunk */
} maru_create_req_t;

/* maru_create_ex() of n chunks in one round trip. `opts` (may be NULL)
 * applies to all; its `parent` is ignored, each request names its own.
 * Returns 0 when the call went through, and then each request's `result`
 * tells how its chunk fared (a failed one has chunk NULL); otherwise a
 * negative errno for the whole call (-EINVAL, -E2BIG, -ENOTCONN) and no
 * chunk was created. */
int maru_create_batch(maru_t *m, maru_create_req_t *reqs, size_t n, const maru_create_opts_t *opts);

/* maru_seal() of n chunks of one maru_t in one round trip; results[i] gets
 * 0 or a negative errno for chunks[i]. Returns 0 when the call went
 * through, else a negative errno for the whole call (-EINVAL for a NULL
 * chunk or chunks of different maru_t). A chunk that is not being written
 * (or is from maru_alloc()) gets -EINVAL. */
int maru_seal_batch(maru_chunk_t *const *chunks, size_t n, int *results);

/* Allocate first, name later: reserves `size` bytes under no name (opts as
 * for maru_create_ex(); its parent is ignored). Fill maru_chunk_data(*out),
 * then maru_publish(), or maru_release() to give the space back. Held by
 * the session like any reservation: gone when the process dies (after the
 * session timeout), kept across a server restart. maru_seal() of it is
 * -EINVAL. Charged from the start to the caller's uid quota and to a quota
 * on "/" (-EDQUOT if it would pass one); a directory's quota once named. */
int maru_alloc(maru_t *m, uint64_t size, const maru_create_opts_t *opts, maru_chunk_t **out);

/* Names a chunk from maru_alloc() at `path` (extending `parent`, or NULL)
 * and seals it, in one step. First writer wins: if `path` exists or is
 * being written, -EEXIST. On any error (-EEXIST, -EACCES, -ENOENT, -EDQUOT
 * when a quota of a directory above `path` would be passed, ...) the
 * handle keeps its reservation, its bytes and maru_chunk_data() valid,
 * still charged to the caller's uid: publish it elsewhere or release it
 * (its space is reused only after maru_release()). A handle not from maru_alloc(), or already
 * published: -EINVAL. On success the handle is a read handle, as after maru_seal(). */
int maru_publish(maru_chunk_t *c, const char *path, const char *parent);

/* --- Loading ------------------------------------------------------------ */

/* Opens a sealed chunk for reading, with a lease. */
int maru_open(maru_t *m, const char *path, maru_chunk_t **out);

/* Opens the longest prefix of paths[0..n) that exists, in one round trip:
 * stops at the first path that is missing (or unreadable). out[0..*hits)
 * receive read handles, each to be released; out[*hits..n) are set to
 * NULL. Returns 0 even when *hits < n. A bad path anywhere in the batch,
 * even past the first miss, fails the call with its error (-EINVAL,
 * -ENAMETOOLONG) and nothing held. */
int maru_lookup_prefix(maru_t *m, const char *const *paths, size_t n, maru_chunk_t **out,
                       size_t *hits);

/* How many of paths[0..n) from the start exist as sealed chunks the
 * caller may read, stopping at the first that does not, in one round trip
 * and taking no lease: a counted chunk may be gone (evicted, unlinked) by
 * the time it is opened. */
int maru_count_prefix(maru_t *m, const char *const *paths, size_t n, size_t *count);

/* The chunk's bytes: contiguous, in shared memory, valid until release.
 * Writable only before maru_seal(). On a host that reaches the pool through
 * maru-agent, they are a local copy, fetched at the first call (NULL if that
 * fails; maru_read_into() reports why). */
void *maru_chunk_data(maru_chunk_t *c);
uint64_t maru_chunk_size(const maru_chunk_t *c);

/* Copies chunk bytes [off, off+len) into `dst` (memory the caller owns,
 * e.g. registered with a GPU). For a chunk of a pool reached through an
 * agent the bytes land in `dst` directly, with no staging copy.
 * -EINVAL if out of range. */
int maru_read_into(maru_chunk_t *c, void *dst, uint64_t off, uint64_t len);

typedef struct maru_read_op {
  maru_chunk_t *chunk;
  void *dst;
  uint64_t off;
  uint64_t len;
} maru_read_op_t;

/* maru_read_into() of many ranges (of chunks of one maru_t), with all the
 * remote transfers in flight at once. */
int maru_read_into_batch(const maru_read_op_t *ops, size_t n);

typedef struct maru_write_op {
  maru_chunk_t *chunk; /* a writable chunk (from maru_create or maru_alloc) */
  const void *src;
  uint64_t off;
  uint64_t len;
} maru_write_op_t;

/* Gathers many buffers into writable chunks: copies src[0, len) to chunk
 * bytes [off, off+len) for each op. On a host that reaches the pool
 * through maru-agent the bytes go to the chunk's staging buffer, written
 * to the pool at maru_seal() (or at maru_publish_part() for its parts).
 * -EINVAL, and nothing copied, for an op out of range or a chunk that is
 * not writable.
 *
 * Copies of 4 MiB or more into the pool use stores that bypass the CPU's
 * caches (non-temporal, fenced before the call returns): a chunk's fresh
 * extent is not cached, and a plain memcpy() into it first reads every
 * line it overwrites, which made filling a 32 MiB chunk ~1.5x slower than
 * a memcpy between cached buffers. So fill large chunks with these calls
 * rather than memcpy() into maru_chunk_data(); the bytes are not left in
 * the writer's cache (a reader on another CPU reads them from memory,
 * as it would after any other traffic). MARU_STREAM_WRITES=0 in the
 * environment (read at connect) makes them plain copies. */
int maru_write_from_batch(const maru_write_op_t *ops, size_t n);

/* maru_write_from_batch() of one op: copies src[0, len) into the writable
 * chunk `c` at [off, off+len). Same errors and copy. The handle's thread
 * rule holds (one thread at a time per chunk). */
int maru_write_from(maru_chunk_t *c, const void *src, uint64_t off, uint64_t len);

/* --- Layer-wise chunks -------------------------------------------------- */
/*
 * A writer that computes a chunk piece by piece (an engine's KV cache layer
 * by layer) publishes each piece as it is done, and readers on other
 * processes consume the pieces while the rest is computed:
 *
 *   writer: maru_create_ex(.. opts.parts = L ..); for each layer i: fill
 *           part i, maru_publish_part(c, i); then maru_seal(c).
 *   reader: maru_open_partial(); for each layer i: maru_wait_part(c, i, t),
 *           then read part i (maru_read_into(), or maru_chunk_data()).
 *
 * Part i is bytes [i * size / parts, (i + 1) * size / parts). A reader's
 * handle holds a lease like maru_open()'s: the extents are not reused while
 * it is held, whatever becomes of the writer. If the writer aborts
 * (maru_release() without seal), disconnects, or dies and its session is
 * reaped (after the server's session timeout), waits fail with
 * -ECONNABORTED: the chunk will never be sealed, and bytes of parts not
 * published may be anything (never the bytes of another chunk). Published
 * parts stay readable until release.
 *
 * The wait is a server wait on the fast lane: the reader's call is held by
 * the server until the writer's maru_publish_part(), maru_seal() or end, so
 * a writer's death is noticed by the one party that sees it. A server holds
 * at most 64 waits per session at once (more: -EMFILE) and 512 in all
 * (-ENFILE). A partially published chunk does not survive a server
 * restart as such: its readers' leases are lost (-ESTALE) and the writer
 * may still seal it.
 */
#define MARU_PARTS_MAX 4096

/* Writer: parts [0, upto] of a chunk created with opts.parts are final;
 * readers waiting for them wake. Monotonic: publishing an already
 * published part does nothing and returns 0. maru_seal() publishes the
 * rest. A chunk created without parts has one part (publishing part 0
 * before the seal is allowed). -EINVAL for a read handle, a chunk from
 * maru_alloc(), or upto >= maru_chunk_parts(). */
int maru_publish_part(maru_chunk_t *c, uint32_t upto);

/* Reader: a read handle, with a lease, on the chunk at `path` if it is
 * sealed or being written (by anyone; the chunk's size is then the size
 * reserved). -ENOENT if neither; -EACCES/-EPERM as for maru_open(). On a
 * chunk being written, read only the parts maru_wait_part() returned 0 for:
 * maru_read_into() of bytes past them is -EBUSY (maru_chunk_data() of a
 * remote one is NULL until the last part is published). */
int maru_open_partial(maru_t *m, const char *path, maru_chunk_t **out);

/* Reader: 0 once part `part` is published (at once for a sealed chunk, or
 * a part seen published before); -ETIMEDOUT after timeout_ms
 * milliseconds (timeout_ms < 0: no limit; 0: just look); -ECONNABORTED if
 * the writer aborted or died; -EINVAL for part >= maru_chunk_parts() or a
 * writer's handle; -ESTALE if the lease was lost (server restart);
 * -EMFILE/-ENFILE: too many waits at the server (see above). */
int maru_wait_part(maru_chunk_t *c, uint32_t part, int timeout_ms);

/* The number of parts (1 for a chunk written in one piece); 0 for NULL. */
uint32_t maru_chunk_parts(const maru_chunk_t *c);

/* --- Asynchronous batches ----------------------------------------------- */
/*
 * maru_read_into_batch() and maru_write_from_batch() run in the background
 * on a worker thread of the maru_t (started at the first async call): the
 * call returns at once with a future. results[i] (the array may be NULL;
 * otherwise it must stay valid until the future is done) receives 0 or a
 * negative errno for ops[i]; the ops array itself is copied. The buffers,
 * and the chunks the ops name, must stay valid until then: do not release,
 * seal or write through a chunk of a pending batch. Batches of one maru_t
 * run one after the other, in submission order. All ops of a batch name
 * chunks of one maru_t (else -EINVAL, nothing submitted); at most
 * MARU_BATCH_MAX ops (-E2BIG).
 *
 * Threads: a future may be waited on, polled and freed from any thread, but
 * freed once.
 */
typedef struct maru_future maru_future_t;

int maru_read_into_batch_async(const maru_read_op_t *ops, size_t n, int *results,
                               maru_future_t **out);
int maru_write_from_batch_async(const maru_write_op_t *ops, size_t n, int *results,
                                maru_future_t **out);
/* Waits up to timeout_ms (< 0: no limit) for the batch: its result, 0 if
 * every op succeeded, else the first op's error in op order; -ETIMEDOUT
 * leaves it pending. */
int maru_future_wait(maru_future_t *f, int timeout_ms);
/* An eventfd that becomes readable (and stays so) when the batch is done:
 * for poll/epoll loops. Owned by the future. */
int maru_future_fd(maru_future_t *f);
/* Frees the future, waiting first if the batch is still running. */
void maru_future_free(maru_future_t *f);

/* Recomputes the checksum recorded at seal. 0 if it matches or none was
 * recorded, -EBADMSG if the bytes differ. */
int maru_verify(maru_chunk_t *c);

/* Whether a read in place can be trusted: call it after reading the bytes
 * (maru_chunk_data(), maru_read_into(), maru_verify()); if it returns 0 the
 * bytes read were the chunk's own. Returns
 *   0        the lease certainly held from maru_open() (or the seal) until
 *            this call: the server heard from the session within half its
 *            timeout all along, and no resume lost the lease;
 *   -ESTALE  it may have lapsed: the process was stopped or stalled (SIGSTOP,
 *            a long pause) past half the session timeout, or the session was
 *            resumed without this lease (the server expired the session or
 *            restarted, and the chunk was removed meanwhile). Its extents may
 *            hold another chunk's bytes now: discard what was read and
 *            release the handle. It stays -ESTALE for this handle;
 *   -EINVAL  the handle holds no lease (a chunk being written).
 * Cheap enough for every read: atomic loads and clock_gettime(), no lock, no
 * round trip. A stall shorter than half the timeout that the server outlived
 * costs nothing; a longer one or a server restart of that length is reported
 * even if the lease survived (reopen the chunk to find out). */
int maru_lease_check(maru_chunk_t *c);

/* Drops the lease (or aborts an unsealed chunk) and frees the handle. */
int maru_release(maru_chunk_t *c);

/* maru_release() of chunks[0..n) (each at most once; they may come from
 * different maru_t): every handle is freed whatever becomes of the others.
 * results[i] (results may be NULL) gets what maru_release(chunks[i]) would
 * return (-EINVAL for NULL); returns 0, or the first of them that is not 0,
 * or -EINVAL with nothing freed when chunks is NULL and n is not 0. Read
 * handles next to each other in the array (a maru_lookup_prefix() answer)
 * give their leases back in runs of up to 64: one hold of each lock a run,
 * not one a chunk. */
int maru_release_batch(maru_chunk_t *const *chunks, size_t n, int *results);

/* --- Namespace and lifecycle -------------------------------------------- */

/* Removes a chunk. Readers holding it keep reading their bytes. */
int maru_unlink(maru_t *m, const char *path);

/* Pins a chunk against eviction until unpinned; maru_pin_ttl() pins it for
 * ttl_ms milliseconds at most. */
int maru_pin(maru_t *m, const char *path);
int maru_pin_ttl(maru_t *m, const char *path, uint64_t ttl_ms);
int maru_unpin(maru_t *m, const char *path);

/* maru_pin_ttl() (ttl_ms 0: no deadline), maru_unpin() and maru_unlink() of
 * n paths in one round trip; results[i] gets 0 or a negative errno for
 * paths[i]. Return 0 when the call went through, else a negative errno for
 * the whole call (-EINVAL, -E2BIG, -ENOTCONN). */
int maru_pin_batch(maru_t *m, const char *const *paths, size_t n, uint64_t ttl_ms, int *results);
int maru_unpin_batch(maru_t *m, const char *const *paths, size_t n, int *results);
int maru_unlink_batch(maru_t *m, const char *const *paths, size_t n, int *results);

/* Retention hints: what the caller expects of a chunk's reads, for the
 * eviction order of the server's default policy, `frequency` (`lru` and
 * `prefix` accept hints and ignore them). A hint only reorders: a kept chunk still
 * ages and is evicted when nothing older is left, a pool that is full still
 * evicts, and a quota still counts every byte. Not a pin (maru_pin()).
 * Hints are soft state: forgotten at a server restart and with the chunk.
 *   MARU_HINT_NONE  forget an earlier hint;
 *   MARU_HINT_KEEP  a reader is expected: the chunk is on a conversation
 *                   (session) that is still open, whose next turn reads its
 *                   prefix again. Stays until the next hint;
 *   MARU_HINT_DROP  no reader is expected: the conversation ended. Undone
 *                   by the next read, and refused (the call still succeeds)
 *                   by a chunk that another chain in use extends: one being
 *                   written, one read and not dropped, or more than four; so
 *                   a shared system prompt under an ended conversation
 *                   keeps its place.
 * Connectors hint a conversation's chain after storing a turn (KEEP) and
 * when the session closes (DROP): see docs/integrations.md. */
#define MARU_HINT_NONE 0
#define MARU_HINT_KEEP 1
#define MARU_HINT_DROP 2

/* Hints the chunk at `path`. 0, or -EINVAL (bad hint or path), -ENOENT,
 * -EISDIR, -EACCES (only the owner, root or a writer of the chunk may hint
 * it), -EBUSY (not sealed yet: hint after maru_seal()), -ENOTCONN. */
int maru_hint(maru_t *m, const char *path, int hint);
/* maru_hint() of n paths in one round trip, as maru_pin_batch(): results[i]
 * gets 0 or a negative errno for paths[i]; returns 0 when the call went
 * through, else a negative errno for the whole call (-EINVAL for a bad hint,
 * -E2BIG, -ENOTCONN). The paths are hinted last first, so a chain given
 * prefix first is dropped from its tail up to where another chain branches
 * off; a caller splitting a longer chain should send its tail's batch first. */
int maru_hint_batch(maru_t *m, const char *const *paths, size_t n, int hint, int *results);

typedef struct maru_pool_info {
  uint64_t total; /* allocatable bytes */
  uint64_t free;  /* bytes free now */
  uint64_t unit;  /* allocation unit: chunks take whole units */
  uint64_t files; /* files and directories */
} maru_pool_info_t;

/* Capacity and usage of the pool behind `m`. */
int maru_pool_info(maru_t *m, maru_pool_info_t *out);

typedef struct maru_region {
  void *base;      /* start of this process's mapping of one pool device */
  uint64_t length; /* bytes */
  uint32_t device; /* the device's index in the pool */
} maru_region_t;

/* The pool mappings of this process, for registering them once with a
 * device (cudaHostRegister): every chunk created with
 * MARU_CREATE_CONTIGUOUS, and every chunk in one extent, has its bytes
 * inside one of them. Fills out[0..min(max, count)) and sets *count to the
 * number of regions (0 on a host that reaches the pool through an agent). */
int maru_pool_regions(maru_t *m, maru_region_t *out, size_t max, size_t *count);

/* A static description of a negative (or positive) errno. */
const char *maru_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* MARU_DIRECT_H */
