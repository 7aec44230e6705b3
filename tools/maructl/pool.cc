// maructl mkpool and pool show: pool devices, without a server.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "alloc/pool_device.h"
#include "common/json_output.h"
#include "maructl/maructl.h"
#include "util/units.h"

namespace maru::ctl {

int Mkpool(int argc, char **argv) {
  uint64_t size = 0, unit = 0, index_size = 0, log_size = 0;
  int64_t numa = -1;
  std::string label, mode = "660", coherence = "hw";
  bool force = false, sparse = false;
  Flags flags("maructl mkpool PATH [--size SIZE] [OPTIONS]",
              "Formats a pool device: a file (created or resized) or a devdax device. A file\n"
              "on hugetlbfs, or on a tmpfs mounted with huge=always, is mapped in huge pages,\n"
              "as a devdax device is; its unit is then at least a huge page (2M).");
  flags.Size("size", &size, "pool size, e.g. 512M, 4G (required for files; devdax: whole device)");
  flags.Size("unit", &unit,
             "allocation unit (default 64K for files, 2M for devdax and huge pages)");
  flags.Int("numa-node", &numa, "bind a file pool's memory to this NUMA node");
  flags.String("label", &label, "a name for the pool");
  flags.String("mode", &mode, "permissions of a pool file, octal");
  flags.String("coherence", &coherence,
               "hw (the hardware keeps hosts' caches coherent: one host, CXL 3) or flush\n"
               "(it does not: a CXL 2.0 switch; writers flush, readers invalidate)");
  flags.Size("index-size", &index_size,
             "reserve this much of the pool for the shared lookup index, so that every\n"
             "host that maps the pool looks up without a message (default: what the\n"
             "server's default --index-entries and --index-sessions need for the pool's\n"
             "size; 0: none, the server keeps an index file beside the pool)");
  index_size = kIndexForServer;  // after the flag took its (empty) default text
  flags.Size("log-size", &log_size,
             "reserve this much of the pool for the metadata replication log that hot\n"
             "standby servers tail (docs/ha.md; default 0: none)");
  flags.Bool("force", &force, "reformat a device that already holds a pool (its chunks are lost)");
  flags.Bool("sparse", &sparse,
             "do not allocate a pool file's memory up front (benchmarks of metadata)");
  std::vector<std::string> args;
  Status s = flags.Parse(argc, argv, 2, &args);
  if (!s.ok()) return Fail(s.message());
  if (flags.help_requested()) return fputs(flags.Help().c_str(), stdout), 0;
  if (args.size() != 1) return Fail("mkpool takes one PATH (see --help)");
  Result<Coherence> mode_of_coherence = ParseCoherence(coherence);
  if (!mode_of_coherence.ok()) return Fail(mode_of_coherence.status().message());
  FormatOptions options;
  options.coherence = *mode_of_coherence;
  options.size = size;
  options.unit = unit;
  options.numa_node = static_cast<int>(numa);
  options.label = label;
  options.index_bytes = index_size;
  options.log_bytes = log_size;
  options.force = force;
  options.sparse = sparse;
  char *end = nullptr;
  options.mode = static_cast<uint32_t>(strtoul(mode.c_str(), &end, 8));
  if (*end || options.mode > 0777) return Fail("--mode takes octal permissions");
  Result<Superblock> sb = FormatPool(args[0], options);
  if (!sb.ok()) return Fail(sb.status().ToString());
  printf("formatted %s: %s pool, %s unit, %s pages, %s coherence, uuid %s\n", args[0].c_str(),
         FormatSize(sb->size).c_str(), FormatSize(sb->unit).c_str(),
         FormatSize(sb->alignment).c_str(), CoherenceName(sb->coherence),
         UuidToString(sb->pool_uuid).c_str());
  return 0;
}

namespace {

Json SuperblockJson(const std::string &device, const Superblock &sb) {
  Json j;
  j["device"] = device;
  j["pool_uuid"] = UuidToString(sb.pool_uuid);
  j["device_uuid"] = UuidToString(sb.device_uuid);
  j["label"] = sb.label;
  j["size"] = sb.size;
  j["data_offset"] = sb.data_offset;
  j["unit"] = sb.unit;
  j["alignment"] = sb.alignment;
  char epoch[20];
  snprintf(epoch, sizeof(epoch), "%016" PRIx64, sb.epoch);
  j["epoch"] = epoch;
  j["numa_node"] = sb.numa_node;
  j["coherence"] = CoherenceName(sb.coherence);
  j["control_offset"] = sb.control_offset;
  j["index_offset"] = sb.index_offset;
  j["index_bytes"] = sb.index_bytes;
  j["log_offset"] = sb.log_offset;
  j["log_bytes"] = sb.log_bytes;
  j["created_ns"] = sb.created_ns;
  return j;
}

}  // namespace

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
  if (json)
    PrintJson(SuperblockJson(args[0], *sb));
  else
    printf("device:       %s\n%s", args[0].c_str(), sb->Describe().c_str());
  return 0;
}

}  // namespace maru::ctl
