// maructl: administer a Maru pool and server. See man/maructl.8.
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "alloc/pool_device.h"
#include "client/meta_client.h"
#include "client/pool_map.h"
#include "json_writer.h"
#include "util/address.h"
#include "util/checksum.h"
#include "util/flags.h"
#include "util/units.h"

using namespace maru;
using Stub = rpc::Meta::Stub;

namespace {

int Fail(const std::string &message) {
  fprintf(stderr, "maructl: %s\n", message.c_str());
  return 1;
}

std::string Time(int64_t ns) {
  if (ns == 0) return "-";
  time_t t = ns / 1000000000;
  tm local;
  localtime_r(&t, &local);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

std::string ModeString(uint32_t mode) {
  std::string s = S_ISDIR(mode) ? "d" : "-";
  const char *rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) s += (mode & (0400 >> i)) ? rwx[i] : '-';
  if (mode & S_ISVTX) s[9] = (mode & 01) ? 't' : 'T';
  return s;
}

const char *StateName(rpc::FileState s) {
  switch (s) {
    case rpc::WRITING:
      return "writing";
    case rpc::SEALED:
      return "sealed";
    case rpc::DIRECTORY:
      return "directory";
    default:
      return "?";
  }
}

// Common options of the commands that talk to a server.
struct Command {
  std::string server = kDefaultServerAddress;
  bool json = false;
  Flags flags;
  std::vector<std::string> args;
  std::unique_ptr<MetaClient> client;

  Command(const std::string &usage, const std::string &summary) : flags(usage, summary) {
    flags.String("server", &server, "maru-server address");
    flags.Bool("json", &json, "print JSON instead of text");
  }

  // Parses argv from `first`; returns -1 to go on, else the exit code.
  int Parse(int argc, char **argv, int first) {
    Status s = flags.Parse(argc, argv, first, &args);
    if (!s.ok()) return Fail(s.message());
    if (flags.help_requested()) {
      fputs(flags.Help().c_str(), stdout);
      return 0;
    }
    return -1;
  }

  int Connect() {
    ClientOptions options;
    options.client_name = "maructl";
    options.heartbeat = false;
    options.retry_window_ms = 2000;
    Result<std::unique_ptr<MetaClient>> c = MetaClient::Connect(server, options);
    if (!c.ok()) return Fail(c.status().message() + " (" + strerror(c.status().errnum()) + ")");
    client = std::move(*c);
    return 0;
  }

  template <typename Req, typename Rep>
  int Call(MetaClient::Method<Req, Rep> method, Req &req, Rep *rep, const std::string &what) {
    int rc = client->Call(method, req, rep);
    return rc < 0 ? Fail(what + ": " + strerror(-rc)) : 0;
  }
};

void AttrJson(JsonWriter &j, const rpc::Attr &a) {
  j.Field("ino", a.ino());
  j.Field("generation", a.gen());
  j.Field("size", a.size());
  j.Field("allocated", a.allocated());
  j.Field("mode", a.mode() & 07777);
  j.Field("type", a.state() == rpc::DIRECTORY ? "directory" : "file");
  j.Field("state", StateName(a.state()));
  j.Field("uid", a.uid());
  j.Field("gid", a.gid());
  j.Field("mtime_ns", a.mtime_ns());
  j.Field("atime_ns", a.atime_ns());
  j.Field("hits", a.hits());
  j.Field("leases", a.leases());
  j.Field("pinned", a.pinned());
  j.Field("pin_expiry_ns", a.pin_expiry_ns());
  j.Field("checksum_type", ChecksumName(static_cast<ChecksumKind>(a.checksum_type())));
  j.Field("checksum", a.checksum());
}

// --- pool commands (no server) ------------------------------------------------

int Mkpool(int argc, char **argv) {
  uint64_t size = 0, unit = 0;
  int64_t numa = -1;
  std::string label, mode = "660";
  bool force = false;
  Flags flags("maructl mkpool PATH [--size SIZE] [OPTIONS]",
              "Formats a pool device: a file (created or resized) or a devdax device.");
  flags.Size("size", &size, "pool size, e.g. 512M, 4G (required for files; devdax: whole device)");
  flags.Size("unit", &unit, "allocation unit (default 64K for files, 2M for devdax)");
  flags.Int("numa-node", &numa, "bind a file pool's memory to this NUMA node");
  flags.String("label", &label, "a name for the pool");
  flags.String("mode", &mode, "permissions of a pool file, octal");
  flags.Bool("force", &force, "reformat a device that already holds a pool (its chunks are lost)");
  std::vector<std::string> args;
  Status s = flags.Parse(argc, argv, 2, &args);
  if (!s.ok()) return Fail(s.message());
  if (flags.help_requested()) return fputs(flags.Help().c_str(), stdout), 0;
  if (args.size() != 1) return Fail("mkpool takes one PATH (see --help)");
  FormatOptions options;
  options.size = size;
  options.unit = unit;
  options.numa_node = static_cast<int>(numa);
  options.label = label;
  options.force = force;
  char *end = nullptr;
  options.mode = static_cast<uint32_t>(strtoul(mode.c_str(), &end, 8));
  if (*end || options.mode > 0777) return Fail("--mode takes octal permissions");
  Result<Superblock> sb = FormatPool(args[0], options);
  if (!sb.ok()) return Fail(sb.status().ToString());
  printf("formatted %s: %s pool, %s unit, uuid %s\n", args[0].c_str(), FormatSize(sb->size).c_str(),
         FormatSize(sb->unit).c_str(), UuidToString(sb->pool_uuid).c_str());
  return 0;
}

int PoolShow(int argc, char **argv) {
  bool json = false;
  Flags flags("maructl pool show PATH [--json]", "Prints the superblock of a pool device.");
  flags.Bool("json", &json, "print JSON");
  std::vector<std::string> args;
  Status s = flags.Parse(argc, argv, 3, &args);
  if (!s.ok()) return Fail(s.message());
  if (flags.help_requested()) return fputs(flags.Help().c_str(), stdout), 0;
  if (args.size() != 1) return Fail("pool show takes one PATH");
  Result<Superblock> sb = ReadSuperblock(args[0]);
  if (!sb.ok()) return Fail(sb.status().message());
  if (!json) {
    printf("device:       %s\n%s", args[0].c_str(), sb->Describe().c_str());
    return 0;
  }
  JsonWriter j;
  j.Begin();
  j.Field("device", args[0]);
  j.Field("pool_uuid", UuidToString(sb->pool_uuid));
  j.Field("device_uuid", UuidToString(sb->device_uuid));
  j.Field("label", sb->label);
  j.Field("size", sb->size);
  j.Field("data_offset", sb->data_offset);
  j.Field("unit", sb->unit);
  j.Field("alignment", sb->alignment);
  char epoch[20];
  snprintf(epoch, sizeof(epoch), "%016" PRIx64, sb->epoch);
  j.Field("epoch", epoch);
  j.Field("numa_node", sb->numa_node);
  j.Field("created_ns", sb->created_ns);
  j.End();
  puts(j.str().c_str());
  return 0;
}

// --- server commands ----------------------------------------------------------

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
  if (cmd.json) {
    JsonWriter j;
    j.Begin();
    j.Field("total", st.total());
    j.Field("free", st.free());
    j.Field("reserved", st.reserved());
    j.Field("deferred", st.deferred());
    j.BeginArray("devices");
    for (const auto &d : st.devices()) {
      j.Begin();
      j.Field("index", d.index());
      j.Field("path", d.path());
      j.Field("size", d.size());
      j.Field("used", d.used());
      j.End();
    }
    j.EndArray();
    j.BeginArray("directories");
    for (const auto &d : stats.top_dirs()) {
      j.Begin();
      j.Field("name", d.name());
      j.Field("bytes", d.bytes());
      j.Field("chunks", d.chunks());
      j.End();
    }
    j.EndArray();
    j.End();
    puts(j.str().c_str());
    return 0;
  }
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
  return 0;
}

int Ls(int argc, char **argv) {
  Command cmd("maructl ls [PATH] [--server ADDRESS] [--json]",
              "Lists the chunks under PATH (default /), recursively: size, hits, last access,\n"
              "pin, leases and parent chunk.");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (cmd.args.size() > 1) return Fail("ls takes at most one PATH");
  if (int rc = cmd.Connect()) return rc;
  rpc::ListChunksRequest req;
  req.set_path(cmd.args.empty() ? "/" : cmd.args[0]);
  req.set_max(4096);
  JsonWriter j;
  if (cmd.json)
    j.BeginArrayValue();
  else
    printf("%-10s %6s %-19s %-6s %6s %-8s %s\n", "SIZE", "HITS", "LAST ACCESS", "PIN", "LEASES",
           "STATE", "PATH (PARENT)");
  for (;;) {
    rpc::ListChunksReply rep;
    if (int rc = cmd.Call(&Stub::ListChunks, req, &rep, "ls " + req.path())) return rc;
    for (const auto &c : rep.chunks()) {
      const rpc::Attr &a = c.attr();
      if (cmd.json) {
        j.Begin();
        j.Field("path", c.path());
        AttrJson(j, a);
        j.Field("parent", c.parent_path());
        j.End();
      } else {
        printf("%-10s %6" PRIu64 " %-19s %-6s %6u %-8s %s%s\n", FormatSize(a.size()).c_str(),
               a.hits(), Time(std::max(a.atime_ns(), a.mtime_ns())).c_str(),
               a.pinned() ? "pinned" : "-", a.leases(), StateName(a.state()), c.path().c_str(),
               c.parent_path().empty() ? "" : (" (" + c.parent_path() + ")").c_str());
      }
      req.set_after(c.path());
    }
    if (rep.eof()) break;
  }
  if (cmd.json) {
    j.EndArrayValue();
    puts(j.str().c_str());
  }
  return 0;
}

int Stat(int argc, char **argv) {
  Command cmd("maructl stat PATH [--server ADDRESS] [--json]",
              "Everything the server knows about one file: attributes, extents, leases, pin.");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (cmd.args.size() != 1) return Fail("stat takes one PATH");
  if (int rc = cmd.Connect()) return rc;
  rpc::ListChunksRequest req;
  req.set_path(cmd.args[0]);
  req.set_max(1);
  rpc::ListChunksReply rep;
  rpc::RefRequest areq;
  areq.mutable_ref()->set_path(cmd.args[0]);
  rpc::AttrReply attr;
  if (int rc = cmd.Call(&Stub::GetAttr, areq, &attr, cmd.args[0])) return rc;
  const rpc::ChunkInfo *info = nullptr;
  if (attr.attr().state() != rpc::DIRECTORY) {
    if (int rc = cmd.Call(&Stub::ListChunks, req, &rep, cmd.args[0])) return rc;
    if (rep.chunks_size()) info = &rep.chunks(0);
  }
  const rpc::Attr &a = attr.attr();
  if (cmd.json) {
    JsonWriter j;
    j.Begin();
    j.Field("path", cmd.args[0]);
    AttrJson(j, a);
    j.Field("parent", info ? info->parent_path() : "");
    j.BeginArray("extents");
    if (info)
      for (const auto &e : info->extents()) {
        j.Begin();
        j.Field("device", e.device());
        j.Field("offset", e.offset());
        j.Field("length", e.length());
        j.End();
      }
    j.EndArray();
    j.End();
    puts(j.str().c_str());
    return 0;
  }
  printf("  path: %s\n  type: %s  state: %s  inode: %" PRIu64 "  generation: %" PRIu64 "\n",
         cmd.args[0].c_str(), a.state() == rpc::DIRECTORY ? "directory" : "file",
         StateName(a.state()), a.ino(), a.gen());
  printf("  size: %" PRIu64 " (%s allocated)  mode: %s  uid: %u  gid: %u\n", a.size(),
         FormatSize(a.allocated()).c_str(), ModeString(a.mode()).c_str(), a.uid(), a.gid());
  printf("  modified: %s  accessed: %s\n", Time(a.mtime_ns()).c_str(), Time(a.atime_ns()).c_str());
  printf("  hits: %" PRIu64 "  leases: %u  pinned: %s%s\n", a.hits(), a.leases(),
         a.pinned() ? "yes" : "no",
         a.pin_expiry_ns() ? (" until " + Time(a.pin_expiry_ns())).c_str() : "");
  if (a.checksum_type())
    printf("  checksum: %s %016" PRIx64 "\n",
           ChecksumName(static_cast<ChecksumKind>(a.checksum_type())), a.checksum());
  if (info && !info->parent_path().empty()) printf("  parent: %s\n", info->parent_path().c_str());
  if (info)
    for (const auto &e : info->extents())
      printf("  extent: device %u offset %" PRIu64 " length %" PRIu64 "\n", e.device(), e.offset(),
             e.length());
  return 0;
}

int PinCommand(int argc, char **argv, bool pin) {
  uint64_t ttl = 0;
  Command cmd(
      pin ? "maructl pin PATH [--ttl SECONDS] [--server ADDRESS]"
          : "maructl unpin PATH [--server ADDRESS]",
      pin ? "Pins a chunk: it is never evicted (until --ttl seconds pass)." : "Unpins a chunk.");
  int64_t ttl_s = 0;
  if (pin) cmd.flags.Int("ttl", &ttl_s, "seconds the pin lasts (0: until unpinned)");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (cmd.args.size() != 1) return Fail(std::string(pin ? "pin" : "unpin") + " takes one PATH");
  if (ttl_s < 0) return Fail("--ttl must not be negative");
  ttl = static_cast<uint64_t>(ttl_s) * 1000;
  if (int rc = cmd.Connect()) return rc;
  rpc::PinRequest req;
  req.mutable_ref()->set_path(cmd.args[0]);
  req.set_pin(pin);
  req.set_ttl_ms(ttl);
  rpc::AttrReply rep;
  return cmd.Call(&Stub::Pin, req, &rep, cmd.args[0]);
}

int Evict(int argc, char **argv) {
  int64_t older_than = 0;
  uint64_t bytes = 0;
  Command cmd("maructl evict PATH | --older-than SECONDS | --bytes SIZE [--server ADDRESS]",
              "Evicts one chunk, every chunk not used for SECONDS, or least valuable chunks\n"
              "worth SIZE, by the server's policy. Pinned, open and leased chunks stay.");
  cmd.flags.Int("older-than", &older_than, "evict chunks not used for this many seconds");
  cmd.flags.Size("bytes", &bytes, "evict this much by the eviction policy");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (cmd.args.size() > 1 || (cmd.args.empty() && older_than <= 0 && bytes == 0))
    return Fail("evict needs a PATH, --older-than or --bytes (see --help)");
  if (int rc = cmd.Connect()) return rc;
  rpc::EvictRequest req;
  if (!cmd.args.empty()) req.set_path(cmd.args[0]);
  req.set_older_than_ms(older_than * 1000);
  req.set_bytes(bytes);
  rpc::EvictReply rep;
  if (int rc = cmd.Call(&Stub::Evict, req, &rep, "evict")) return rc;
  if (cmd.json)
    printf("{\"chunks\":%" PRIu64 ",\"bytes\":%" PRIu64 "}\n", rep.chunks(), rep.bytes());
  else
    printf("evicted %" PRIu64 " chunks, %s\n", rep.chunks(), FormatSize(rep.bytes()).c_str());
  return 0;
}

// Maps the pool and recomputes a chunk's checksum; "" if it matches.
std::string VerifyChunk(const PoolMap &pool, const rpc::ChunkInfo &c) {
  const rpc::Attr &a = c.attr();
  if (a.state() != rpc::SEALED || a.checksum_type() == rpc::CHECKSUM_NONE) return "";
  std::unique_ptr<ChunkView> view;
  Result<uint8_t *> data = pool.Address(FromWire(c.extents()), &view);
  if (!data.ok()) return c.path() + ": " + data.status().message();
  uint64_t sum = Checksum(static_cast<ChecksumKind>(a.checksum_type()), *data, a.size());
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
  return PoolMap::Open(info, false);
}

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
  if (cmd.json) {
    printf("{\"path\":\"%s\",\"checksum\":%s,\"ok\":%s}\n", JsonWriter::Escape(cmd.args[0]).c_str(),
           has_sum ? "true" : "false", problems.empty() ? "true" : "false");
  } else if (problems.empty()) {
    printf("%s: %s\n", cmd.args[0].c_str(), has_sum ? "ok" : "ok (no checksum recorded)");
  } else {
    printf("%s\n", problems[0].c_str());
  }
  return problems.empty() ? 0 : 2;
}

int Fsck(int argc, char **argv) {
  bool no_data = false;
  Command cmd("maructl fsck [--server ADDRESS] [--no-data] [--json]",
              "Checks the pool superblocks, the extent maps (no overlap, no leak against the\n"
              "allocator) and every recorded checksum. Exit 0 when all is well, 2 otherwise.");
  cmd.flags.Bool("no-data", &no_data, "skip reading chunk bytes for checksums");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (int rc = cmd.Connect()) return rc;
  std::vector<std::string> problems;
  rpc::OpenSessionReply info = cmd.client->session_info();
  for (const auto &d : info.devices()) {
    Result<Superblock> sb = ReadSuperblock(d.path());
    if (!sb.ok())
      problems.push_back(d.path() + ": " + sb.status().message());
    else if (sb->epoch != d.epoch())
      problems.push_back(d.path() + ": epoch differs from the server's");
  }
  rpc::StatsRequest req;
  rpc::FsckReply rep;
  if (int rc = cmd.Call(&Stub::Fsck, req, &rep, "fsck")) return rc;
  problems.insert(problems.end(), rep.problems().begin(), rep.problems().end());
  uint64_t verified = 0;
  if (!no_data) {
    auto pool = MapPool(cmd);
    if (!pool.ok()) return Fail(pool.status().message());
    if (int rc = ForEachChunk(cmd, "/", [&](const rpc::ChunkInfo &c) {
          if (c.attr().checksum_type() != rpc::CHECKSUM_NONE) ++verified;
          if (std::string p = VerifyChunk(**pool, c); !p.empty()) problems.push_back(p);
        }))
      return rc;
  }
  if (cmd.json) {
    JsonWriter j;
    j.Begin();
    j.Field("ok", problems.empty());
    j.Field("chunks", rep.chunks());
    j.Field("extents", rep.extents());
    j.Field("checksums_verified", verified);
    j.BeginArray("problems");
    for (const auto &p : problems) j.Value(p);
    j.EndArray();
    j.End();
    puts(j.str().c_str());
  } else {
    printf("%" PRIu64 " chunks, %" PRIu64 " extents, %" PRIu64 " checksums verified: %s\n",
           rep.chunks(), rep.extents(), verified, problems.empty() ? "clean" : "PROBLEMS");
    for (const auto &p : problems) printf("  %s\n", p.c_str());
  }
  return problems.empty() ? 0 : 2;
}

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
    JsonWriter j;
    j.BeginArrayValue();
    for (const auto &s : rep.sessions()) {
      if (s.id() == self) continue;
      j.Begin();
      char id[20];
      snprintf(id, sizeof(id), "%016" PRIx64, s.id());
      j.Field("id", id);
      j.Field("client", s.client());
      j.Field("instance", s.instance());
      j.Field("pid", s.pid());
      j.Field("uid", s.uid());
      j.Field("host", s.hostname());
      j.Field("since_ns", s.since_ns());
      j.Field("last_seen_ns", s.last_seen_ns());
      j.Field("leases", s.leases());
      j.Field("reservations", s.reservations());
      j.Field("orphaned", s.orphaned());
      j.End();
    }
    j.EndArrayValue();
    puts(j.str().c_str());
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

int Stats(int argc, char **argv) {
  Command cmd("maructl stats [--server ADDRESS] [--json]",
              "Operation counts and latencies, hit ratio, evictions, bytes stored and loaded.");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  if (int rc = cmd.Connect()) return rc;
  rpc::StatsRequest req;
  rpc::StatsReply st;
  if (int rc = cmd.Call(&Stub::Stats, req, &st, "stats")) return rc;
  const double hit_ratio =
      st.lookups() ? static_cast<double>(st.lookup_hits()) / static_cast<double>(st.lookups()) : 0;
  if (cmd.json) {
    JsonWriter j;
    j.Begin();
    j.Field("uptime_s", static_cast<double>(st.uptime_ns()) / 1e9);
    j.Field("chunks", st.chunks());
    j.Field("sessions", st.sessions());
    j.Field("leases", st.leases());
    j.Field("pins", st.pins());
    j.Field("lookups", st.lookups());
    j.Field("lookup_hits", st.lookup_hits());
    j.Field("hit_ratio", hit_ratio);
    j.Field("evictions", st.evictions());
    j.Field("evicted_bytes", st.evicted_bytes());
    j.Field("bytes_stored", st.bytes_stored());
    j.Field("bytes_loaded", st.bytes_loaded());
    j.BeginObject("evictions_by_reason");
    for (const auto &[reason, n] : st.evictions_by_reason()) j.Field(reason, n);
    j.EndObject();
    j.BeginArray("operations");
    for (const auto &o : st.ops()) {
      if (!o.count()) continue;
      j.Begin();
      j.Field("op", o.op());
      j.Field("count", o.count());
      j.Field("errors", o.errors());
      j.Field("p50_us", o.p50_us());
      j.Field("p99_us", o.p99_us());
      j.End();
    }
    j.EndArray();
    j.End();
    puts(j.str().c_str());
    return 0;
  }
  printf("uptime %.0fs  chunks %" PRIu64 "  sessions %" PRIu64 "  leases %" PRIu64 "  pins %" PRIu64
         "\n",
         static_cast<double>(st.uptime_ns()) / 1e9, st.chunks(), st.sessions(), st.leases(),
         st.pins());
  printf("lookups %" PRIu64 "  hits %" PRIu64 "  hit ratio %.3f  evictions %" PRIu64 " (%s)\n",
         st.lookups(), st.lookup_hits(), hit_ratio, st.evictions(),
         FormatSize(st.evicted_bytes()).c_str());
  printf("stored %s  loaded %s\n\n", FormatSize(st.bytes_stored()).c_str(),
         FormatSize(st.bytes_loaded()).c_str());
  printf("%-14s %10s %8s %10s %10s   (server-side time, microseconds)\n", "OPERATION", "COUNT",
         "ERRORS", "P50", "P99");
  for (const auto &o : st.ops())
    if (o.count())
      printf("%-14s %10" PRIu64 " %8" PRIu64 " %10.1f %10.1f\n", o.op().c_str(), o.count(),
             o.errors(), o.p50_us(), o.p99_us());
  return 0;
}

void Usage() {
  puts(
      "Usage: maructl COMMAND [OPTIONS]\n"
      "Administers Maru pools and servers; every command takes --help.\n\n"
      "Pools:\n"
      "  mkpool PATH --size SIZE   format a pool device (file or /dev/daxX.Y)\n"
      "  pool show PATH            print a device's superblock\n\n"
      "Server (--server ADDRESS, default unix:///run/maru/maru.sock; --json for scripts):\n"
      "  df                        capacity and use per device and top-level directory\n"
      "  ls [PATH]                 chunks with size, hits, last access, pin, leases, parent\n"
      "  stat PATH                 one file in full, with its extents\n"
      "  pin PATH [--ttl S]        keep a chunk from eviction\n"
      "  unpin PATH\n"
      "  evict PATH | --older-than S | --bytes SIZE\n"
      "  fsck                      check superblocks, extent maps and checksums\n"
      "  verify PATH               check one chunk against its checksum\n"
      "  sessions                  connected clients\n"
      "  stats                     operation counts, latencies, hit ratio, evictions");
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) return Fail("no command (see maructl --help)");
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return Usage(), 0;
  if (cmd == "mkpool") return Mkpool(argc, argv);
  if (cmd == "pool") {
    if (argc >= 3 && std::string(argv[2]) == "show") return PoolShow(argc, argv);
    if (argc >= 3 && std::string(argv[2]) == "--help") return Usage(), 0;
    return Fail("unknown pool command (maructl pool show PATH)");
  }
  if (cmd == "df") return Df(argc, argv);
  if (cmd == "ls") return Ls(argc, argv);
  if (cmd == "stat") return Stat(argc, argv);
  if (cmd == "pin") return PinCommand(argc, argv, true);
  if (cmd == "unpin") return PinCommand(argc, argv, false);
  if (cmd == "evict") return Evict(argc, argv);
  if (cmd == "fsck") return Fsck(argc, argv);
  if (cmd == "verify") return Verify(argc, argv);
  if (cmd == "sessions") return Sessions(argc, argv);
  if (cmd == "stats") return Stats(argc, argv);
  return Fail("unknown command '" + cmd + "' (see maructl --help)");
}
