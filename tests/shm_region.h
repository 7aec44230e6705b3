// A region of shared memory for the replication log tests: a file in
// /dev/shm with a unique name, mapped shared, removed at the end. Two
// mappings of one region stand for two hosts mapping the pool.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "harness.h"

namespace maru_test {

class ShmRegion {
 public:
  explicit ShmRegion(uint64_t bytes) : path_("/dev/shm/" + UniqueName("oplog")), bytes_(bytes) {
    int fd = open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0)
      base_ =
          static_cast<uint8_t *>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (base_ == MAP_FAILED) base_ = nullptr;
    if (fd >= 0) close(fd);
  }
  ~ShmRegion() {
    if (base_ != nullptr) munmap(base_, bytes_);
    unlink(path_.c_str());
  }
  ShmRegion(const ShmRegion &) = delete;
  ShmRegion &operator=(const ShmRegion &) = delete;
  uint8_t *base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  const std::string &path() const { return path_; }

 private:
  std::string path_;
  uint64_t bytes_;
  uint8_t *base_ = nullptr;
};

}  // namespace maru_test
