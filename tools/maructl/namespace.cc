// maructl ls, stat, pin, unpin and evict: the chunks of the namespace.
#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "common/json_output.h"
#include "conversions.h"
#include "maructl/maructl.h"
#include "util/checksum.h"
#include "util/units.h"

namespace maru::ctl {
namespace {

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

// Adds the attributes to `j`, after what it holds already.
void AttrJson(Json &j, const rpc::Attr &a) {
  j["ino"] = a.ino();
  j["generation"] = a.gen();
  j["size"] = a.size();
  j["allocated"] = a.allocated();
  j["mode"] = a.mode() & 07777;
  j["type"] = a.state() == rpc::DIRECTORY ? "directory" : "file";
  j["state"] = StateName(a.state());
  j["uid"] = a.uid();
  j["gid"] = a.gid();
  j["mtime_ns"] = a.mtime_ns();
  j["atime_ns"] = a.atime_ns();
  j["hits"] = a.hits();
  j["leases"] = a.leases();
  j["pinned"] = a.pinned();
  j["pin_expiry_ns"] = a.pin_expiry_ns();
  j["checksum_type"] = ChecksumName(FromWire(a.checksum_type()));
  j["checksum"] = a.checksum();
}

Json ChunkJson(const rpc::ChunkInfo &c) {
  Json j;
  j["path"] = c.path();
  AttrJson(j, c.attr());
  j["parent"] = c.parent_path();
  return j;
}

void PrintChunk(const rpc::ChunkInfo &c) {
  const rpc::Attr &a = c.attr();
  printf("%-10s %6" PRIu64 " %-19s %-6s %6u %-8s %s%s\n", FormatSize(a.size()).c_str(), a.hits(),
         Time(std::max(a.atime_ns(), a.mtime_ns())).c_str(), a.pinned() ? "pinned" : "-",
         a.leases(), StateName(a.state()), c.path().c_str(),
         c.parent_path().empty() ? "" : (" (" + c.parent_path() + ")").c_str());
}

}  // namespace

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
  Json list = Json::array();
  if (!cmd.json)
    printf("%-10s %6s %-19s %-6s %6s %-8s %s\n", "SIZE", "HITS", "LAST ACCESS", "PIN", "LEASES",
           "STATE", "PATH (PARENT)");
  for (;;) {
    rpc::ListChunksReply rep;
    if (int rc = cmd.Call(&Stub::ListChunks, req, &rep, "ls " + req.path())) return rc;
    for (const auto &c : rep.chunks()) {
      if (cmd.json)
        list.push_back(ChunkJson(c));
      else
        PrintChunk(c);
      req.set_after(c.path());
    }
    if (rep.eof()) break;
  }
  if (cmd.json) PrintJson(list);
  return 0;
}

namespace {

Json StatJson(const std::string &path, const rpc::Attr &a, const rpc::ChunkInfo *info) {
  Json j;
  j["path"] = path;
  AttrJson(j, a);
  j["parent"] = info ? info->parent_path() : "";
  Json extents = Json::array();
  if (info)
    for (const auto &e : info->extents())
      extents.push_back({{"device", e.device()}, {"offset", e.offset()}, {"length", e.length()}});
  j["extents"] = std::move(extents);
  return j;
}

void PrintStat(const std::string &path, const rpc::Attr &a, const rpc::ChunkInfo *info) {
  printf("  path: %s\n  type: %s  state: %s  inode: %" PRIu64 "  generation: %" PRIu64 "\n",
         path.c_str(), a.state() == rpc::DIRECTORY ? "directory" : "file", StateName(a.state()),
         a.ino(), a.gen());
  printf("  size: %" PRIu64 " (%s allocated)  mode: %s  uid: %u  gid: %u\n", a.size(),
         FormatSize(a.allocated()).c_str(), ModeString(a.mode()).c_str(), a.uid(), a.gid());
  printf("  modified: %s  accessed: %s\n", Time(a.mtime_ns()).c_str(), Time(a.atime_ns()).c_str());
  printf("  hits: %" PRIu64 "  leases: %u  pinned: %s%s\n", a.hits(), a.leases(),
         a.pinned() ? "yes" : "no",
         a.pin_expiry_ns() ? (" until " + Time(a.pin_expiry_ns())).c_str() : "");
  if (a.checksum_type())
    printf("  checksum: %s %016" PRIx64 "\n", ChecksumName(FromWire(a.checksum_type())),
           a.checksum());
  if (info && !info->parent_path().empty()) printf("  parent: %s\n", info->parent_path().c_str());
  if (info)
    for (const auto &e : info->extents())
      printf("  extent: device %u offset %" PRIu64 " length %" PRIu64 "\n", e.device(), e.offset(),
             e.length());
}

}  // namespace

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
  if (cmd.json)
    PrintJson(StatJson(cmd.args[0], attr.attr(), info));
  else
    PrintStat(cmd.args[0], attr.attr(), info);
  return 0;
}

namespace {

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

}  // namespace

int Pin(int argc, char **argv) {
  return PinCommand(argc, argv, true);
}
int Unpin(int argc, char **argv) {
  return PinCommand(argc, argv, false);
}

int Hint(int argc, char **argv) {
  Command cmd("maructl hint keep|drop|none PATH... [--server ADDRESS]",
              "Tells the server's eviction what to expect of chunks' reads (maru_hint(3)):\n"
              "keep (a conversation still open), drop (it ended; a chain given prefix first is\n"
              "dropped from its tail up to a prefix others still use), none (forget).");
  if (int rc = cmd.Parse(argc, argv, 2); rc >= 0) return rc;
  static const char *const kHints[] = {"none", "keep", "drop"};  // MARU_HINT_* order
  if (cmd.args.size() < 2) return Fail("hint takes keep, drop or none and at least one PATH");
  const auto *hint = std::find(std::begin(kHints), std::end(kHints), cmd.args[0]);
  if (hint == std::end(kHints))
    return Fail("hint: '" + cmd.args[0] + "' is not keep, drop or none");
  if (int rc = cmd.Connect()) return rc;
  rpc::HintRequest req;
  req.set_hint(static_cast<uint32_t>(hint - std::begin(kHints)));
  for (size_t i = 1; i < cmd.args.size(); ++i) req.add_paths(cmd.args[i]);
  rpc::ErrorsReply rep;
  if (int rc = cmd.Call(&Stub::Hint, req, &rep, "hint")) return rc;
  int rc = 0;
  for (int i = 0; i < rep.errors_size(); ++i)
    if (rep.errors(i) != 0) rc = Fail(req.paths(i) + ": " + strerror(rep.errors(i)));
  return rc;
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
    PrintJson({{"chunks", rep.chunks()}, {"bytes", rep.bytes()}});
  else
    printf("evicted %" PRIu64 " chunks, %s\n", rep.chunks(), FormatSize(rep.bytes()).c_str());
  return 0;
}

}  // namespace maru::ctl
