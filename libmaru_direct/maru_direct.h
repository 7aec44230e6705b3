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
 * A maru_chunk_t belongs to one thread at a time. Handles do not survive
 * fork(), and a child forked after maru_connect() must exec before it uses
 * the library (the RPC runtime shares its event loop with the parent until
 * then); multiprocessing "spawn" and fork+exec are fine. Any number of
 * processes may connect to the same server.
 *
 * Hosts that cannot map the pool (no CXL) reach it through maru-agent, over
 * UCX one-sided get/put: the same calls work; maru_create() hands out a
 * local staging buffer that maru_seal() writes to the pool, and reads fetch
 * into a local copy or, with maru_read_into(), straight into the caller's
 * buffer. A remote read is reported -ESTALE, never silently stale, if the
 * lease may have lapsed while the bytes moved; -ECONNRESET if the agent went
 * away (the next call reconnects).
 *
 * Environment: MARU_SERVER (the default target when maru_connect gets NULL),
 * MARU_DATA=remote (use the agents even where the pool is visible),
 * MARU_POPULATE=0 (do not prefault the pool mapping at connect),
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
 * the pool, once for the whole process. */
int maru_connect(const char *target, maru_t **out);

typedef struct maru_connect_opts {
  const char *instance; /* this client's name ("vllm-0"), shown by maructl
                         * sessions, marutop and /metrics; NULL for none;
                         * at most 64 bytes (-ENAMETOOLONG), printable
                         * (control characters: -EINVAL) */
} maru_connect_opts_t;

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
 * being written, -EEXIST and the reserved space is freed (the handle then
 * holds nothing; release it). Other errors (-EACCES, -ENOENT, -EDQUOT when
 * a quota of a directory above `path` would be passed, ...) keep the
 * reservation, still charged to the caller's uid: publish it elsewhere or
 * release it. A handle not from maru_alloc(), or already published:
 * -EINVAL. On success the handle is a read handle, as after maru_seal(). */
int maru_publish(maru_chunk_t *c, const char *path, const char *parent);

/* --- Loading ------------------------------------------------------------ */

/* Opens a sealed chunk for reading, with a lease. */
int maru_open(maru_t *m, const char *path, maru_chunk_t **out);

/* Opens the longest prefix of paths[0..n) that exists, in one round trip:
 * stops at the first path that is missing (or unreadable). out[0..*hits)
 * receive read handles, each to be released; out[*hits..n) are set to
 * NULL. Returns 0 even when *hits < n. */
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
