// maru-bench coherence: what the flush coherence mode (mkpool --coherence
// flush: writers flush, readers invalidate) costs against hw, per store and
// per lookup. Two nodes it starts, one on each kind of pool, measured in
// the same run, their rounds interleaved so that whatever else the host
// does falls on both alike.
#include <sys/stat.h>

#include <cinttypes>
#include <filesystem>
#include <memory>

#include "bench/common.h"
#include "bench/node.h"
#include "bench/paths.h"
#include "common/json_output.h"
#include "util/cache_flush.h"
#include "util/units.h"

namespace maru::bench {
namespace {

// One pool's node, its connection and what it measured (ns an operation).
struct Side {
  std::string mode;
  std::unique_ptr<Node> node;
  maru_t *m = nullptr;
  std::vector<double> store_ns, lookup_ns, open_ns;
  uint64_t stored = 0;
};

// Create, copy in, seal: what a writer pays for a chunk. The release and
// the unlink (to keep the pool from filling) are not timed.
bool TimeStores(Side *s, const AlignedBuffer &src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const std::string path = "/coh/s" + std::to_string(s->stored++);
    maru_chunk_t *c = nullptr;
    const int64_t t0 = MonotonicNs();
    if (maru_create(s->m, path.c_str(), src.size(), &c) != 0) return false;
    memcpy(maru_chunk_data(c), src.data(), src.size());
    const int rc = maru_seal(c);
    s->store_ns.push_back(static_cast<double>(MonotonicNs() - t0));
    maru_release(c);
    if (rc != 0 || maru_unlink(s->m, path.c_str()) != 0) return false;
  }
  return true;
}

// A 1-key lookup (maru_count_prefix: the index's entry, no lease) and a
// 1-key open + release (entry, lease slot, and in flush mode the chunk's
// lines dropped): each timed over a batch, the clock read once a batch.
bool TimeLookups(Side *s, int64_t batches) {
  const char *key[] = {"/coh/key"};
  constexpr int kBatch = 200;
  for (int64_t b = 0; b < batches; ++b) {
    size_t count = 0;
    int64_t t0 = MonotonicNs();
    for (int i = 0; i < kBatch; ++i)
      if (maru_count_prefix(s->m, key, 1, &count) != 0 || count != 1) return false;
    s->lookup_ns.push_back(static_cast<double>(MonotonicNs() - t0) / kBatch);
    t0 = MonotonicNs();
    for (int i = 0; i < kBatch; ++i) {
      maru_chunk_t *c = nullptr;
      if (maru_open(s->m, key[0], &c) != 0) return false;
      maru_release(c);
    }
    s->open_ns.push_back(static_cast<double>(MonotonicNs() - t0) / kBatch);
  }
  return true;
}

}  // namespace

int RunCoherence(int argc, char **argv) {
  uint64_t size = 256 << 10;
  int64_t rounds = 6, stores = 100, batches = 50;
  Flags flags("maru-bench coherence [--size SIZE] [--rounds N] [--json]",
              "Per-store and per-lookup cost of a pool made with --coherence flush against one\n"
              "made with --coherence hw, on two nodes this command starts, rounds interleaved.");
  flags.Size("size", &size, "bytes a chunk (stored, and the one opened)");
  flags.Int("rounds", &rounds, "rounds; each measures both pools, in turn");
  flags.Int("stores", &stores, "stores a pool a round");
  flags.Int("batches", &batches, "batches of 200 lookups (and of 200 opens) a pool a round");
  bool json = false;
  flags.Bool("json", &json, "print one JSON line");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  if (size == 0 || rounds <= 0 || stores <= 0 || batches <= 0)
    return Fail("--size, --rounds, --stores and --batches must be positive");

  char tmpl[] = "/tmp/maru-coherence.XXXXXX";
  if (!mkdtemp(tmpl)) return Fail("cannot make a work directory");
  const std::string work = tmpl;
  Node::RemoveOnSignal(work);
  Processes procs;
  Side sides[2];
  sides[0].mode = "hw";
  sides[1].mode = "flush";
  auto cleanup = [&](int rc) {
    for (Side &s : sides) {
      if (s.m) maru_disconnect(s.m);
      if (s.node) s.node->Stop();
    }
    procs.StopAll();
    std::error_code ec;
    std::filesystem::remove_all(work, ec);
    return rc;
  };
  const AlignedBuffer src(size, 7);
  for (Side &s : sides) {
    const std::string dir = work + "/" + s.mode;
    mkdir(dir.c_str(), 0700);
    s.node = std::make_unique<Node>(dir, &procs, s.mode);
    std::string error;
    if (!s.node->Format(std::max<uint64_t>(256 << 20, 64 * size), 0, &error, false, s.mode) ||
        !s.node->StartServer({"--grace-ms", "0"}, &error))
      return cleanup(Fail(s.mode + " node: " + error));
    int err = 0;
    s.m = ConnectPath(s.node->address(), true, &err);
    if (!s.m) return cleanup(Fail("connect: " + std::string(maru_strerror(err))));
    maru_chunk_t *c = nullptr;
    if (maru_create(s.m, "/coh/key", size, &c) != 0) return cleanup(Fail("store the lookup key"));
    memcpy(maru_chunk_data(c), src.data(), size);
    if (maru_seal(c) != 0) return cleanup(Fail("seal the lookup key"));
    maru_release(c);
  }
  for (int64_t r = 0; r < rounds; ++r) {
    // Each round starts with the other pool than the last one did.
    for (int k = 0; k < 2; ++k) {
      Side &s = sides[(r + k) % 2];
      if (!TimeStores(&s, src, stores) || !TimeLookups(&s, batches))
        return cleanup(Fail(s.mode + " pool: an operation failed"));
    }
  }
  Side &hw = sides[0], &fl = sides[1];
  const double store[2] = {Quantile(hw.store_ns, 0.5), Quantile(fl.store_ns, 0.5)};
  const double lookup[2] = {Quantile(hw.lookup_ns, 0.5), Quantile(fl.lookup_ns, 0.5)};
  const double open[2] = {Quantile(hw.open_ns, 0.5), Quantile(fl.open_ns, 0.5)};
  if (json) {
    Json j;
    j["size"] = size;
    j["instruction"] = FlushInstruction();
    j["store_us"]["hw"] = Rounded(store[0] / 1e3, 2);
    j["store_us"]["flush"] = Rounded(store[1] / 1e3, 2);
    j["lookup_ns"]["hw"] = Rounded(lookup[0], 1);
    j["lookup_ns"]["flush"] = Rounded(lookup[1], 1);
    j["open_release_ns"]["hw"] = Rounded(open[0], 1);
    j["open_release_ns"]["flush"] = Rounded(open[1], 1);
    j["store_ratio"] = Rounded(store[1] / store[0], 3);
    j["lookup_ratio"] = Rounded(lookup[1] / lookup[0], 3);
    j["open_release_ratio"] = Rounded(open[1] / open[0], 3);
    PrintJson(j);
  } else {
    printf("coherence flush vs hw: %s chunks, %" PRId64 " rounds interleaved, flush by %s\n",
           FormatSize(size).c_str(), rounds, FlushInstruction());
    printf("%-34s %10s %10s %8s\n", "p50", "hw", "flush", "flush/hw");
    printf("%-34s %10.1f %10.1f %8.2f\n", "store (create+copy+seal), us", store[0] / 1e3,
           store[1] / 1e3, store[1] / store[0]);
    printf("%-34s %10.0f %10.0f %8.2f\n", "1-key lookup (count_prefix), ns", lookup[0], lookup[1],
           lookup[1] / lookup[0]);
    printf("%-34s %10.0f %10.0f %8.2f\n", "1-key open + release, ns", open[0], open[1],
           open[1] / open[0]);
  }
  return cleanup(0);
}

}  // namespace maru::bench
