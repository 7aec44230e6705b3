// A pool device mapped into this process: a file (e.g. in /dev/shm, the
// emulated pool), or a devdax character device (/dev/daxX.Y). Every process
// maps each device once, whole, and shares the mapping between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "alloc/superblock.h"
#include "util/status.h"

namespace maru {

struct FormatOptions {
  uint64_t size = 0;     // required for files; devdax: 0 = whole device
  uint64_t unit = 0;     // 0: 2 MiB on devdax, 64 KiB on files
  int numa_node = -1;    // bind the file's memory to this node
  uint32_t mode = 0660;  // permissions of a created pool file
  std::string label;
  Coherence coherence = Coherence::kHw;  // what every host of the pool does
  // Regions reserved between the superblock and the data (rounded up to the
  // mapping alignment; 0: none). The control page is always reserved.
  uint64_t index_bytes = 0;  // the shared lookup index (kIndexForServer: see below)
  uint64_t log_bytes = 0;    // the metadata replication log
  bool force = false;        // reformat a device that already holds a pool
  // A file pool's memory is not allocated up front (pages come as they are
  // touched): for measuring metadata at sizes the host's memory cannot hold.
  bool sparse = false;
};

// FormatOptions::index_bytes for what maru-server's default index (its
// default --index-entries and --index-sessions) needs for the pool's size.
constexpr uint64_t kIndexForServer = ~0ull;

// Writes a fresh superblock (maructl mkpool). Creates or resizes a file
// pool and allocates its memory up front, so no client pays first-touch
// faults later. Refuses to overwrite a valid pool unless options.force, in
// which case the pool keeps its uuid but gets a new epoch.
Result<Superblock> FormatPool(const std::string &path, const FormatOptions &options);

// Reads and validates the superblock without mapping the data.
Result<Superblock> ReadSuperblock(const std::string &path);

// The pages that back a pool file, as a devdax device's alignment does a
// device's: huge pages on hugetlbfs (which takes no write(), only
// mappings) and on a tmpfs mounted with huge=always or huge=within_size
// (or with shmem huge pages forced for every mount); base pages elsewhere.
struct FilePages {
  uint64_t size = 4096;
  bool hugetlbfs = false;
};
FilePages PagesOfFile(int fd);

// Whether a process prefaults its mapping of a device (MAP_POPULATE), so the
// data path never takes a page fault. Prefaulting costs time at connect
// (about 67 ms per GiB of 4 KiB pages) and, on a pool file, allocates every
// page the format left unallocated: a sparse pool or a 1 TiB device would be
// filled by every client that connects.
enum class Populate {
  kNever,
  kAlways,
  // Prefault a device of at most kPopulateAutoMax bytes whose memory is all
  // allocated already (a devdax device, or a file pool formatted without
  // --sparse); larger or sparse ones are faulted in as they are touched.
  kAuto,
};
inline constexpr uint64_t kPopulateAutoMax = 16ull << 30;

class PoolDevice {
 public:
  struct OpenOptions {
    bool writable = true;
    Populate populate = Populate::kNever;
  };

  // Opens and maps the device; fails with a message that says how to format
  // it when the superblock is missing or invalid.
  static Result<std::unique_ptr<PoolDevice>> Open(const std::string &path,
                                                  const OpenOptions &options);
  ~PoolDevice();
  PoolDevice(const PoolDevice &) = delete;
  PoolDevice &operator=(const PoolDevice &) = delete;

  const std::string &path() const { return path_; }
  const Superblock &superblock() const { return superblock_; }
  uint8_t *base() const { return base_; }
  uint64_t mapped_bytes() const { return mapped_; }
  int fd() const { return fd_; }
  bool is_devdax() const { return devdax_; }
  // Whether Open prefaulted the mapping.
  bool populated() const { return populated_; }
  // True if [p, p+len) lies inside this mapping.
  bool Contains(const void *p, uint64_t len) const;

 private:
  PoolDevice() = default;
  std::string path_;
  Superblock superblock_;
  int fd_ = -1;
  uint8_t *base_ = nullptr;
  uint64_t mapped_ = 0;
  bool devdax_ = false;
  bool populated_ = false;
};

}  // namespace maru
