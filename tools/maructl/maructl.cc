// maructl: administer a Maru pool and server. See man/maructl.8.
// This file: the command table and what the commands share; the commands
// live in pool.cc, namespace.cc, admin.cc and quota.cc.
#include "maructl/maructl.h"

#include <cstdio>
#include <ctime>

namespace maru::ctl {

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

Command::Command(const std::string &usage, const std::string &summary) : flags(usage, summary) {
  flags.String("server", &server, "maru-server address");
  flags.Bool("json", &json, "print JSON instead of text");
}

int Command::Parse(int argc, char **argv, int first) {
  Status s = flags.Parse(argc, argv, first, &args);
  if (!s.ok()) return Fail(s.message());
  if (flags.help_requested()) {
    fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  return -1;
}

int Command::Connect() {
  ClientOptions options;
  options.client_name = "maructl";
  options.heartbeat = false;
  options.retry_window_ms = 2000;
  Result<std::unique_ptr<MetaClient>> c = MetaClient::Connect(server, options);
  if (!c.ok()) return Fail(c.status().message() + " (" + strerror(c.status().errnum()) + ")");
  client = std::move(*c);
  return 0;
}

namespace {

void Usage() {
  puts(
      "Usage: maructl COMMAND [OPTIONS]\n"
      "Administers Maru pools and servers; every command takes --help.\n\n"
      "Pools:\n"
      "  mkpool PATH --size SIZE   format a pool device (file or /dev/daxX.Y)\n"
      "  pool show PATH            print a device's superblock\n"
      "  cluster status --pool PATH [--etcd HOST:PORT,...]   the pool's servers: leader,\n"
      "                            epoch, each standby's lag (docs/ha.md)\n\n"
      "Server (--server ADDRESS, default unix:///run/maru/maru.sock; --json for scripts):\n"
      "  df                        capacity and use per device and top-level directory\n"
      "  ls [PATH]                 chunks with size, hits, last access, pin, leases, parent\n"
      "  stat PATH                 one file in full, with its extents\n"
      "  pin PATH [--ttl S]        keep a chunk from eviction\n"
      "  unpin PATH\n"
      "  hint keep|drop|none PATH...   tell eviction whether chunks will be read again\n"
      "  evict PATH | --older-than S | --bytes SIZE\n"
      "  fsck                      check superblocks, extent maps and checksums\n"
      "  verify PATH               check one chunk against its checksum\n"
      "  sessions                  connected clients\n"
      "  stats                     operation counts, latencies, hit ratio, evictions\n"
      "  quota set DIR|--uid UID BYTES [--pins N]   limit a tree's or a uid's space (root)\n"
      "  quota show                every quota with its use");
}

int Pool(int argc, char **argv) {
  if (argc >= 3 && std::string(argv[2]) == "show") return PoolShow(argc, argv);
  if (argc >= 3 && std::string(argv[2]) == "--help") return Usage(), 0;
  return Fail("unknown pool command (maructl pool show PATH)");
}

struct Entry {
  const char *name;
  int (*run)(int argc, char **argv);
};

constexpr Entry kCommands[] = {
    {"mkpool", Mkpool}, {"pool", Pool},         {"df", Df},
    {"ls", Ls},         {"stat", Stat},         {"pin", Pin},
    {"unpin", Unpin},   {"evict", Evict},       {"fsck", Fsck},
    {"verify", Verify}, {"sessions", Sessions}, {"stats", Stats},
    {"quota", Quota},   {"hint", Hint},         {"cluster", Cluster},
};

}  // namespace
}  // namespace maru::ctl

int main(int argc, char **argv) {
  using namespace maru::ctl;
  if (argc < 2) return Fail("no command (see maructl --help)");
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return Usage(), 0;
  for (const Entry &e : kCommands)
    if (cmd == e.name) return e.run(argc, argv);
  return Fail("unknown command '" + cmd + "' (see maructl --help)");
}
