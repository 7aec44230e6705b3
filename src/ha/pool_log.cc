#include "ha/pool_log.h"

namespace maru {

Result<std::unique_ptr<PoolLog>> PoolLog::Open(const std::string &path) {
  Result<std::unique_ptr<PoolDevice>> device = PoolDevice::Open(path, {});
  if (!device.ok()) return device.status();
  // Our copy of the superblock, validated at open: the region's place is
  // never read again from the device.
  const Superblock &sb = (*device)->superblock();
  if (sb.log_bytes == 0) return std::unique_ptr<PoolLog>();
  if (sb.log_offset + sb.log_bytes > (*device)->mapped_bytes())
    return Status::Error(EINVAL, path + ": the replication log region is outside the mapping");
  Result<OpLog> log = OpLog::Attach((*device)->base() + sb.log_offset, sb.log_bytes, sb.coherence);
  if (!log.ok()) return Status::Error(log.status().errnum(), path + ": " + log.status().message());
  return std::unique_ptr<PoolLog>(new PoolLog(std::move(*device), std::move(*log)));
}

}  // namespace maru
