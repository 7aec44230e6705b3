// maructl df, fsck, verify, sessions and stats: the state of a server and
// its pool as a whole.
#include <cinttypes>
#include <cstdio>
#include <functional>

#include "alloc/pool_device.h"
#include "client/pool_map.h"
#include "common/json_output.h"
#include "conversions.h"
#include "maructl/maructl.h"
#include "util/checksum.h"
#include "util/units.h"

namespace maru::ctl {
namespace {

Json DfJson(const rpc::StatfsReply &st, const rpc::StatsReply &stats) {
  Json j;
  j["total"] = st.total();
  j["free"] = st.free();
  j["reserved"] = st.reserved();
  j["deferred"] = st.deferred();
  Json devices = Json::array();
  for (const auto &d : st.devices())
    devices.push_back(
        {{"index", d.index()}, {"path", d.path()}, {"size", d.size()}, {"used", d.used()}});
  j["devices"] = std::move(devices);
  Json dirs = Json::array();
  for (const auto &d : stats.top_dirs())
    dirs.push_back({{"name", d.name()}, {"bytes", d.bytes()}, {"chunks", d.chunks()}});
  j["directories"] = std::move(dirs);
  j["quotas"] = QuotasJson(stats.quotas());
  return j;
}

void PrintDf(const rpc::StatfsReply &st, const rpc::StatsReply &stats) {
  printf("%-6s %-32s %9s %9s %9s %5s\n", "DEVICE", "PATH", "SIZE", "USED", "FREE", "USE%");
  for (const auto &d : st.devices())
    printf("%-6u %-32s %9s %9s %9s %4.0f%%\n", d.index(), d.path().c_str(),
           FormatSize(d.size()).c_str(), FormatSize(d.used()).c_str(),
           FormatSize(d.size() - d.used()).c_str(),
           d.size() ? 100.0 * static_cast<double>(d.used()) / static_cast<double>(d.size()) : 0);
  printf("reserved by unfinished writes: %s; waiting for readers to let go: %s\n",
         FormatSize(st.reserved()).c_str(), FormatSize(st.deferred()).c_str());
  if (stats.top_dirs_size()) {
    printf("\n%-40s %10s %8s\n", "DIRECTORY", "BYTES", "CHUNKS");
    for (const auto &d : stats.top_dirs())
      printf("/%-39s %10s %8" PRIu64 "\n", d.name().c_str(), FormatSize(d.bytes()).c_str(),
             d.chunks());
  }
  if (stats.quotas_size()) {
    printf("\n");
    PrintQuotas(stats.quotas());
  }
}

}  // namespace

int Df(int argc, char **argv) {
  Command cmd("maructl df [--server ADDRESS] [--json]",
              "Pool capacity and use per device, and bytes and chunks per top-level directory.");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (int rc = cmd.Connect()) return rc;
  rpc::StatfsRequest sreq;
  rpc::StatfsReply st;
  if (int rc = cmd.Call(&Stub::Statfs, sreq, &st, "statfs")) return rc;
  rpc::StatsRequest req;
  rpc::StatsReply stats;
  if (int rc = cmd.Call(&Stub::Stats, req, &stats, "stats")) return rc;
  if (cmd.json)
    PrintJson(DfJson(st, stats));
  else
    PrintDf(st, stats);
  return 0;
}

namespace {

// Maps the pool and recomputes a chunk's checksum; "" if it matches.
std::string VerifyChunk(const PoolMap &pool, const rpc::ChunkInfo &c) {
  const rpc::Attr &a = c.attr();
  if (a.state() != rpc::SEALED || a.checksum_type() == rpc::CHECKSUM_NONE) return "";
  std::unique_ptr<ChunkView> view;
  Result<uint8_t *> data = pool.Address(FromWire(c.extents()), &view);
  if (!data.ok()) return c.path() + ": " + data.status().message();
  uint64_t sum = Checksum(FromWire(a.checksum_type()), *data, a.size());
  if (sum == a.checksum()) return "";
  char buf[512];
  snprintf(buf, sizeof(buf),
           "%s: checksum mismatch (recorded %016" PRIx64 ", computed %016" PRIx64 ")",
           c.path().c_str(), a.checksum(), sum);
  return buf;
}

// Visits every chunk under `path`.
int ForEachChunk(Command &cmd, const std::string &path,
                 const std::function<void(const rpc::ChunkInfo &)> &f) {
  rpc::ListChunksRequest req;
  req.set_path(path);
  req.set_max(4096);
  for (;;) {
    rpc::ListChunksReply rep;
    if (int rc = cmd.Call(&Stub::ListChunks, req, &rep, "listing " + path)) return rc;
    for (const auto &c : rep.chunks()) {
      f(c);
      req.set_after(c.path());
    }
    if (rep.eof()) return 0;
  }
}

Result<std::unique_ptr<PoolMap>> MapPool(Command &cmd) {
  rpc::OpenSessionReply info = cmd.client->session_info();
  return PoolMap::Open(info, Populate::kNever);
}

}  // namespace

int Verify(int argc, char **argv) {
  Command cmd("maructl verify PATH [--server ADDRESS] [--json]",
              "Recomputes the checksum recorded when PATH was sealed. Exit 0 if the bytes match.");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (cmd.args.size() != 1) return Fail("verify takes one PATH");
  if (int rc = cmd.Connect()) return rc;
  auto pool = MapPool(cmd);
  if (!pool.ok()) return Fail(pool.status().message());
  std::vector<std::string> problems;
  bool found = false, has_sum = false;
  if (int rc = ForEachChunk(cmd, cmd.args[0], [&](const rpc::ChunkInfo &c) {
        if (c.path() != cmd.args[0]) return;
        found = true;
        has_sum = c.attr().checksum_type() != rpc::CHECKSUM_NONE;
        if (std::string p = VerifyChunk(**pool, c); !p.empty()) problems.push_back(p);
      }))
    return rc;
  if (!found) return Fail(cmd.args[0] + ": not a chunk");
  if (cmd.json)
    PrintJson({{"path", cmd.args[0]}, {"checksum", has_sum}, {"ok", problems.empty()}});
  else if (problems.empty())
    printf("%s: %s\n", cmd.args[0].c_str(), has_sum ? "ok" : "ok (no checksum recorded)");
  else
    printf("%s\n", problems[0].c_str());
  return problems.empty() ? 0 : 2;
}

namespace {

// Superblocks against the epochs the server knows.
void CheckSuperblocks(Command &cmd, std::vector<std::string> *problems) {
  rpc::OpenSessionReply info = cmd.client->session_info();
  for (const auto &d : info.devices()) {
    Result<Superblock> sb = ReadSuperblock(d.path());
    if (!sb.ok())
      problems->push_back(d.path() + ": " + sb.status().message());
    else if (sb->epoch != d.epoch())
      problems->push_back(d.path() + ": epoch differs from the server's");
  }
}

}  // namespace

int Fsck(int argc, char **argv) {
  bool no_data = false;
  Command cmd("maructl fsck [--server ADDRESS] [--no-data] [--json]",
              "Checks the pool superblocks, the extent maps (no overlap, no leak against the\n"
              "allocator) and every recorded checksum. Exit 0 when all is well, 2 otherwise.");
  cmd.flags.Bool("no-data", &no_data, "skip reading chunk bytes for checksums");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (int rc = cmd.Connect()) return rc;
  std::vector<std::string> problems;
  CheckSuperblocks(cmd, &problems);
  rpc::StatsRequest req;
  rpc::FsckReply rep;
  if (int rc = cmd.Call(&Stub::Fsck, req, &rep, "fsck")) return rc;
  problems.insert(problems.end(), rep.problems().begin(), rep.problems().end());
  uint64_t verified = 0;
  if (!no_data) {
    auto pool = MapPool(cmd);
    if (!pool.ok()) return Fail(pool.status().message());
    if (int rc = ForEachChunk(cmd, "/", [&](const rpc::ChunkInfo &c) {
          // Only sealed chunks are checked: an unfinished write has no final sum.
          if (c.attr().state() == rpc::SEALED && c.attr().checksum_type() != rpc::CHECKSUM_NONE)
            ++verified;
          if (std::string p = VerifyChunk(**pool, c); !p.empty()) problems.push_back(p);
        }))
      return rc;
  }
  if (cmd.json) {
    PrintJson({{"ok", problems.empty()},
               {"chunks", rep.chunks()},
               {"extents", rep.extents()},
               {"checksums_verified", verified},
               {"problems", problems}});
  } else {
    printf("%" PRIu64 " chunks, %" PRIu64 " extents, %" PRIu64 " checksums verified: %s\n",
           rep.chunks(), rep.extents(), verified, problems.empty() ? "clean" : "PROBLEMS");
    for (const auto &p : problems) printf("  %s\n", p.c_str());
  }
  return problems.empty() ? 0 : 2;
}

namespace {

Json SessionJson(const rpc::SessionInfo &s) {
  char id[20];
  snprintf(id, sizeof(id), "%016" PRIx64, s.id());
  Json j;
  j["id"] = id;
  j["client"] = s.client();
  j["instance"] = s.instance();
  j["pid"] = s.pid();
  j["uid"] = s.uid();
  j["host"] = s.hostname();
  j["since_ns"] = s.since_ns();
  j["last_seen_ns"] = s.last_seen_ns();
  j["leases"] = s.leases();
  j["reservations"] = s.reservations();
  j["orphaned"] = s.orphaned();
  return j;
}

}  // namespace

int Sessions(int argc, char **argv) {
  Command cmd("maructl sessions [--server ADDRESS] [--json]",
              "Who is connected: client, instance, pid, uid, host, since, leases, reservations.");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (int rc = cmd.Connect()) return rc;
  rpc::StatsRequest req;
  rpc::SessionsReply rep;
  if (int rc = cmd.Call(&Stub::ListSessions, req, &rep, "sessions")) return rc;
  const uint64_t self = cmd.client->session();
  if (cmd.json) {
    Json list = Json::array();
    for (const auto &s : rep.sessions())
      if (s.id() != self) list.push_back(SessionJson(s));
    PrintJson(list);
    return 0;
  }
  printf("%-16s %-16s %-16s %7s %6s %-12s %-19s %6s %6s\n", "SESSION", "CLIENT", "INSTANCE", "PID",
         "UID", "HOST", "SINCE", "LEASES", "WRITES");
  for (const auto &s : rep.sessions()) {
    if (s.id() == self) continue;
    printf("%016" PRIx64 " %-16s %-16s %7u %6u %-12s %-19s %6u %6u%s\n", s.id(), s.client().c_str(),
           s.instance().empty() ? "-" : s.instance().c_str(), s.pid(), s.uid(),
           s.hostname().c_str(), Time(s.since_ns()).c_str(), s.leases(), s.reservations(),
           s.orphaned() ? " (waiting to be resumed)" : "");
  }
  return 0;
}

namespace {

double HitRatio(const rpc::StatsReply &st) {
  return st.lookups() ? static_cast<double>(st.lookup_hits()) / static_cast<double>(st.lookups())
                      : 0;
}

Json StatsJson(const rpc::StatsReply &st) {
  Json j;
  j["uptime_s"] = static_cast<double>(st.uptime_ns()) / 1e9;
  j["chunks"] = st.chunks();
  j["sessions"] = st.sessions();
  j["leases"] = st.leases();
  j["pins"] = st.pins();
  if (st.leader_epoch()) j["leader_epoch"] = st.leader_epoch();
  for (const auto &m : st.members())
    j["servers"].push_back({{"id", m.id()},
                            {"endpoint", m.endpoint()},
                            {"leads", m.leads()},
                            {"lag_bytes", m.lag_bytes()},
                            {"electable", m.electable()}});
  j["lookups"] = st.lookups();
  j["lookup_hits"] = st.lookup_hits();
  j["hit_ratio"] = HitRatio(st);
  j["evictions"] = st.evictions();
  j["evicted_bytes"] = st.evicted_bytes();
  j["bytes_stored"] = st.bytes_stored();
  j["bytes_loaded"] = st.bytes_loaded();
  Json reasons = Json::object();
  for (const auto &[reason, n] : st.evictions_by_reason()) reasons[reason] = n;
  j["evictions_by_reason"] = std::move(reasons);
  Json ops = Json::array();
  for (const auto &o : st.ops())
    if (o.count())
      ops.push_back({{"op", o.op()},
                     {"count", o.count()},
                     {"errors", o.errors()},
                     {"p50_us", o.p50_us()},
                     {"p99_us", o.p99_us()}});
  j["operations"] = std::move(ops);
  return j;
}

void PrintStats(const rpc::StatsReply &st) {
  printf("uptime %.0fs  chunks %" PRIu64 "  sessions %" PRIu64 "  leases %" PRIu64 "  pins %" PRIu64
         "\n",
         static_cast<double>(st.uptime_ns()) / 1e9, st.chunks(), st.sessions(), st.leases(),
         st.pins());
  printf("lookups %" PRIu64 "  hits %" PRIu64 "  hit ratio %.3f  evictions %" PRIu64 " (%s)\n",
         st.lookups(), st.lookup_hits(), HitRatio(st), st.evictions(),
         FormatSize(st.evicted_bytes()).c_str());
  printf("stored %s  loaded %s\n\n", FormatSize(st.bytes_stored()).c_str(),
         FormatSize(st.bytes_loaded()).c_str());
  printf("%-14s %10s %8s %10s %10s   (server-side time, microseconds)\n", "OPERATION", "COUNT",
         "ERRORS", "P50", "P99");
  for (const auto &o : st.ops())
    if (o.count())
      printf("%-14s %10" PRIu64 " %8" PRIu64 " %10.1f %10.1f\n", o.op().c_str(), o.count(),
             o.errors(), o.p50_us(), o.p99_us());
}

}  // namespace

int Stats(int argc, char **argv) {
  Command cmd("maructl stats [--server ADDRESS] [--json]",
              "Operation counts and latencies, hit ratio, evictions, bytes stored and loaded.");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (int rc = cmd.Connect()) return rc;
  rpc::StatsRequest req;
  rpc::StatsReply st;
  if (int rc = cmd.Call(&Stub::Stats, req, &st, "stats")) return rc;
  if (cmd.json)
    PrintJson(StatsJson(st));
  else
    PrintStats(st);
  return 0;
}

}  // namespace maru::ctl
