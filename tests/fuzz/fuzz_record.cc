// Metadata record decode: what RocksDB hands back at start is parsed into
// inodes; a damaged record must not crash the server.
#include <string>

#include "meta/inode.h"
#include "meta/records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace maru;
  schema::Inode record;
  if (!record.ParseFromArray(data, static_cast<int>(size))) return 0;
  Inode inode = FromRecord(record);
  schema::Inode again = ToRecord(inode);
  Inode back = FromRecord(again);
  if (back.ino != inode.ino || back.mode != inode.mode || back.name != inode.name ||
      back.current.has_value() != inode.current.has_value() ||
      back.pending.has_value() != inode.pending.has_value())
    __builtin_trap();
  if (inode.current && back.current->extents.size() != inode.current->extents.size())
    __builtin_trap();
  return 0;
}
