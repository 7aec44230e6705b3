// maructl: administer a Maru pool and server. See man/maructl.8.
#include <cstdio>
#include <string>
#include <vector>

#include "alloc/pool_device.h"
#include "util/flags.h"
#include "util/units.h"

using namespace maru;

namespace {

int Fail(const std::string &message) {
  fprintf(stderr, "maructl: %s\n", message.c_str());
  return 1;
}

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
  flags.String("mode", &mode, "permissions of a created pool file, octal");
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
  options.mode = static_cast<uint32_t>(strtoul(mode.c_str(), nullptr, 8));
  Result<Superblock> sb = FormatPool(args[0], options);
  if (!sb.ok()) return Fail(sb.status().ToString());
  printf("formatted %s: %s pool, %s unit, uuid %s\n", args[0].c_str(), FormatSize(sb->size).c_str(),
         FormatSize(sb->unit).c_str(), UuidToString(sb->pool_uuid).c_str());
  return 0;
}

int PoolShow(int argc, char **argv) {
  Flags flags("maructl pool show PATH", "Prints the superblock of a pool device.");
  std::vector<std::string> args;
  Status s = flags.Parse(argc, argv, 3, &args);
  if (!s.ok()) return Fail(s.message());
  if (flags.help_requested()) return fputs(flags.Help().c_str(), stdout), 0;
  if (args.size() != 1) return Fail("pool show takes one PATH");
  Result<Superblock> sb = ReadSuperblock(args[0]);
  if (!sb.ok()) return Fail(sb.status().message());
  printf("device:       %s\n%s", args[0].c_str(), sb->Describe().c_str());
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) return Fail("no command (see maructl --help)");
  std::string cmd = argv[1];
  if (cmd == "mkpool") return Mkpool(argc, argv);
  if (cmd == "pool" && argc >= 3 && std::string(argv[2]) == "show") return PoolShow(argc, argv);
  return Fail("unknown command '" + cmd + "' (see maructl --help)");
}
