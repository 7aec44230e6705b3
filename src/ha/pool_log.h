// The replication log of a pool device: the device mapped, and the OpLog
// over the region its superblock reserves (`maructl mkpool --log-size`).
#pragma once

#include <memory>
#include <string>

#include "alloc/pool_device.h"
#include "ha/op_log.h"
#include "util/status.h"

namespace maru {

class PoolLog {
 public:
  // The log of the pool at `path`; nullptr (not an error) when the pool has
  // no log region.
  static Result<std::unique_ptr<PoolLog>> Open(const std::string &path);
  OpLog &log() { return log_; }

 private:
  PoolLog(std::unique_ptr<PoolDevice> device, OpLog log)
      : device_(std::move(device)), log_(std::move(log)) {}
  std::unique_ptr<PoolDevice> device_;
  OpLog log_;
};

}  // namespace maru
