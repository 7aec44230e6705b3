#include "alloc/pool_device.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <numa.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "alloc/dax_device.h"
#include "proto/index_layout.h"
#include "util/clock.h"
#include "util/units.h"

namespace maru {
namespace {

constexpr uint64_t kFileUnit = 64u << 10;
constexpr uint64_t kDaxUnit = 2u << 20;

uint64_t RoundUp(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

std::string HowToFormat(const std::string &path) {
  return "format it with: maructl mkpool " + path + " --size SIZE";
}

struct DeviceGeometry {
  bool devdax = false;
  bool hugetlbfs = false;  // a file whose pages are huge pages, mapped only
  uint64_t size = 0;
  uint64_t align = 0;  // the device's alignment, or the file's page size
};

// The size of a transparent huge page (2 MiB on x86-64).
uint64_t PmdPageSize() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
  uint64_t size = 0;
  return f >> size && size ? size : 2u << 20;
}

// Whether the tmpfs of device `dev` gives files huge pages: its mount's
// huge= option (from mountinfo), or shmem huge pages forced for all.
bool TmpfsHuge(dev_t dev) {
  std::ifstream forced("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string policy((std::istreambuf_iterator<char>(forced)), std::istreambuf_iterator<char>());
  if (policy.find("[force]") != std::string::npos) return true;
  std::ifstream mounts("/proc/self/mountinfo");
  const std::string want = std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
  for (std::string line; std::getline(mounts, line);) {
    // ID PARENT MAJOR:MINOR ROOT POINT OPTIONS ... - TYPE SOURCE SUPER_OPTIONS
    std::istringstream in(line);
    std::string id, parent, device;
    in >> id >> parent >> device;
    const size_t dash = line.find(" - ");
    if (device != want || dash == std::string::npos) continue;
    const std::string super = line.substr(line.rfind(' ') + 1);
    return super.find("huge=always") != std::string::npos ||
           super.find("huge=within_size") != std::string::npos;
  }
  return false;
}

Result<DeviceGeometry> Probe(int fd, const std::string &path) {
  struct stat st;
  if (fstat(fd, &st) < 0) return Status::Error(errno, "cannot stat " + path);
  DeviceGeometry g;
  if (S_ISCHR(st.st_mode)) {
    Result<DaxGeometry> dax = ProbeDaxDevice(path);
    if (!dax.ok()) return dax.status();
    g.devdax = true;
    g.size = dax->size;
    g.align = dax->align;
  } else if (S_ISREG(st.st_mode)) {
    g.size = st.st_size;
    const FilePages pages = PagesOfFile(fd);
    g.align = pages.size;
    g.hugetlbfs = pages.hugetlbfs;
  } else {
    return Status::Error(EINVAL, path + " is neither a regular file nor a devdax device");
  }
  return g;
}

// Allocates the file's memory now: with fallocate, or by touching each page
// under an mbind policy when the memory must come from one NUMA node.
Status Preallocate(int fd, uint64_t size, int numa_node, const std::string &path) {
  if (numa_node < 0) {
    if (fallocate(fd, 0, 0, size) == 0 || errno == EOPNOTSUPP) return Status::Ok();
    return Status::Error(errno, "cannot allocate " + FormatSize(size) + " for " + path);
  }
  if (numa_available() < 0) return Status::Error(ENOTSUP, "NUMA is not available on this host");
  if (numa_node > numa_max_node())
    return Status::Error(EINVAL, "no NUMA node " + std::to_string(numa_node));
  void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::Error(errno, "cannot map " + path);
  numa_tonode_memory(p, size, numa_node);
  const long page = sysconf(_SC_PAGESIZE);
  for (uint64_t off = 0; off < size; off += page) static_cast<volatile uint8_t *>(p)[off] = 0;
  munmap(p, size);
  return Status::Ok();
}

// hugetlbfs has no write(): the bytes go through a mapping of the pages
// that hold them.
Status WriteThroughMapping(int fd, const uint8_t *buf, size_t len, uint64_t off, uint64_t page) {
  const uint64_t start = off / page * page;
  const uint64_t bytes = RoundUp(off + len, page) - start;
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  if (p == MAP_FAILED) return Status::Error(errno, "cannot map the pool's first pages");
  memcpy(static_cast<uint8_t *>(p) + (off - start), buf, len);
  munmap(p, bytes);
  return Status::Ok();
}

Status WriteAll(int fd, const uint8_t *buf, size_t len, off_t off) {
  while (len > 0) {
    ssize_t n = pwrite(fd, buf, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error(n < 0 ? errno : EIO, "cannot write the superblock");
    buf += n;
    len -= n;
    off += n;
  }
  return Status::Ok();
}

// The control page and the regions follow the superblock, each aligned for
// a mapping of its own; the data starts at the next unit after them.
void LayRegions(const FormatOptions &options, Superblock *sb) {
  sb->control_offset = kSuperblockBytes;
  uint64_t end = kSuperblockBytes + kControlBytes;
  if (options.index_bytes) {
    sb->index_offset = RoundUp(end, sb->alignment);
    sb->index_bytes = RoundUp(options.index_bytes, sb->alignment);
    end = sb->index_offset + sb->index_bytes;
  }
  if (options.log_bytes) {
    sb->log_offset = RoundUp(end, sb->alignment);
    sb->log_bytes = RoundUp(options.log_bytes, sb->alignment);
    end = sb->log_offset + sb->log_bytes;
  }
  sb->data_offset = RoundUp(end, std::max(sb->unit, sb->alignment));
}

// Each region's owner finds an all-zero header on a new pool: empty.
constexpr uint64_t kRegionHeaderBytes = 64 << 10;

Status ReadAll(int fd, uint8_t *buf, size_t len, off_t off) {
  while (len > 0) {
    ssize_t n = pread(fd, buf, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Error(errno, "cannot read the superblock");
    if (n == 0) return Status::Error(EINVAL, "device too small to hold a superblock");
    buf += n;
    len -= n;
    off += n;
  }
  return Status::Ok();
}

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Result<Superblock> ReadFromFd(int fd, const std::string &path, uint64_t device_size) {
  if (device_size < kSuperblockBytes)
    return Status::Error(EINVAL, path + " holds no Maru pool (too small); " + HowToFormat(path));
  std::vector<uint8_t> buf(kSuperblockBytes);
  MARU_RETURN_IF_ERROR(ReadAll(fd, buf.data(), buf.size(), 0));
  Result<Superblock> sb = Superblock::Decode(buf.data(), device_size);
  if (!sb.ok())
    return Status::Error(EINVAL, path + ": " + sb.status().message() + "; " + HowToFormat(path));
  return sb;
}

}  // namespace

Result<Superblock> FormatPool(const std::string &path, const FormatOptions &options) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, options.mode);
  if (fd < 0) return Status::Error(errno, "cannot open " + path);
  FdCloser closer(fd);
  Result<DeviceGeometry> geo = Probe(fd, path);
  if (!geo.ok()) return geo.status();

  Superblock sb;
  sb.pool_uuid = NewUuid();
  sb.device_uuid = NewUuid();
  if (geo->size >= kSuperblockBytes) {
    Result<Superblock> old = ReadFromFd(fd, path, geo->size);
    if (old.ok()) {
      if (!options.force)
        return Status::Error(EEXIST, path + " already holds a Maru pool (uuid " +
                                         UuidToString(old->pool_uuid) +
                                         "); add --force to reformat it and lose its chunks");
      // Same pool and device, new epoch: servers drop the stale metadata.
      sb.pool_uuid = old->pool_uuid;
      sb.device_uuid = old->device_uuid;
    }
  }

  uint64_t size = options.size;
  if (geo->devdax) {
    if (size == 0 || size > geo->size) size = geo->size;
    size = size / geo->align * geo->align;
  } else if (size == 0) {
    return Status::Error(EINVAL, "--size is required for a file pool");
  }
  sb.alignment = geo->align;
  // On huge pages an extent is whole pages: it is mapped on its own (a
  // chunk of several extents) only at a page boundary, and a smaller unit
  // would give each chunk's ends pages it shares with the next.
  sb.unit = options.unit ? options.unit
                         : (geo->devdax ? kDaxUnit : std::max<uint64_t>(kFileUnit, geo->align));
  if (sb.unit & (sb.unit - 1) || sb.unit < 4096)
    return Status::Error(EINVAL, "allocation unit must be a power of two of at least 4K");
  if ((geo->devdax || geo->hugetlbfs) && sb.unit < geo->align)
    return Status::Error(EINVAL, std::string("allocation unit must be at least the ") +
                                     (geo->devdax ? "device alignment" : "huge page size") + " (" +
                                     FormatSize(geo->align) + ")");
  FormatOptions laid = options;
  if (laid.index_bytes == kIndexForServer) laid.index_bytes = index::DefaultBytes(size / sb.unit);
  LayRegions(laid, &sb);
  size = size / sb.unit * sb.unit;
  if (size < sb.data_offset + sb.unit)
    return Status::Error(EINVAL, "pool too small: at least " +
                                     FormatSize(sb.data_offset + sb.unit) + " with a " +
                                     FormatSize(sb.unit) + " unit");
  sb.size = size;
  sb.epoch = NewEpoch();
  sb.created_ns = RealtimeNs();
  sb.numa_node = options.numa_node;
  sb.label = options.label.substr(0, 63);
  sb.coherence = options.coherence;

  if (!geo->devdax) {
    if (fchmod(fd, options.mode) < 0) return Status::Error(errno, "cannot set the mode of " + path);
    if (ftruncate(fd, static_cast<off_t>(size)) < 0)
      return Status::Error(errno, "cannot resize " + path);
    if (!options.sparse) {
      Status s = Preallocate(fd, size, options.numa_node, path);
      if (!s.ok() && geo->hugetlbfs && s.errnum() == ENOSPC)
        return Status::Error(ENOSPC, s.message() +
                                         ": not enough free huge pages (HugePages_Free in "
                                         "/proc/meminfo; raise vm.nr_hugepages)");
      MARU_RETURN_IF_ERROR(s);
    }
  }
  // A reformatted pool's control page and regions start empty: a server
  // must not read an old leader's fence or an old index as this pool's.
  auto write = [&](const uint8_t *bytes, size_t len, uint64_t off) {
    return geo->hugetlbfs ? WriteThroughMapping(fd, bytes, len, off, geo->align)
                          : WriteAll(fd, bytes, len, static_cast<off_t>(off));
  };
  const std::vector<uint8_t> zeros(kRegionHeaderBytes, 0);
  for (auto [offset, bytes] :
       {std::pair{sb.index_offset, sb.index_bytes}, std::pair{sb.log_offset, sb.log_bytes}})
    if (bytes) MARU_RETURN_IF_ERROR(write(zeros.data(), std::min(bytes, zeros.size()), offset));
  std::vector<uint8_t> buf(kSuperblockBytes + kControlBytes, 0);
  sb.Encode(buf.data());
  MARU_RETURN_IF_ERROR(write(buf.data(), buf.size(), 0));
  if (fsync(fd) < 0 && errno != EINVAL) return Status::Error(errno, "cannot sync " + path);
  return sb;
}

Result<Superblock> ReadSuperblock(const std::string &path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(errno, "cannot open pool " + path);
  FdCloser closer(fd);
  Result<DeviceGeometry> geo = Probe(fd, path);
  if (!geo.ok()) return geo.status();
  return ReadFromFd(fd, path, geo->size);
}

namespace {

// Populate::kAuto's rule: small enough, and no page of it left unallocated
// (prefaulting a hole of a pool file allocates it).
bool ShouldPopulate(Populate mode, int fd, const DeviceGeometry &geo, uint64_t size) {
  if (mode != Populate::kAuto) return mode == Populate::kAlways;
  if (size > kPopulateAutoMax) return false;
  if (geo.devdax) return true;
  struct stat st;
  return fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_blocks) * 512 >= size;
}

}  // namespace

Result<std::unique_ptr<PoolDevice>> PoolDevice::Open(const std::string &path,
                                                     const OpenOptions &options) {
  int fd = open(path.c_str(), (options.writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return Status::Error(errno, "cannot open pool " + path);
  FdCloser closer(fd);
  Result<DeviceGeometry> geo = Probe(fd, path);
  if (!geo.ok()) return geo.status();
  Result<Superblock> sb = ReadFromFd(fd, path, geo->size);
  if (!sb.ok()) return sb.status();

  const bool populate = ShouldPopulate(options.populate, fd, *geo, sb->size);
  int prot = PROT_READ | (options.writable ? PROT_WRITE : 0);
  int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  void *base = mmap(nullptr, sb->size, prot, flags, fd, 0);
  if (base == MAP_FAILED) return Status::Error(errno, "cannot map pool " + path);

  std::unique_ptr<PoolDevice> dev(new PoolDevice());
  dev->path_ = path;
  dev->superblock_ = *sb;
  dev->fd_ = closer.release();
  dev->base_ = static_cast<uint8_t *>(base);
  dev->mapped_ = sb->size;
  dev->devdax_ = geo->devdax;
  dev->populated_ = populate;
  return dev;
}

PoolDevice::~PoolDevice() {
  if (base_) munmap(base_, mapped_);
  if (fd_ >= 0) close(fd_);
}

FilePages PagesOfFile(int fd) {
  FilePages pages;
  pages.size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  struct statfs fs;
  struct stat st;
  if (fstatfs(fd, &fs) != 0 || fstat(fd, &st) != 0) return pages;
  if (static_cast<uint64_t>(fs.f_type) == HUGETLBFS_MAGIC) {
    pages.size = static_cast<uint64_t>(fs.f_bsize);  // the mount's huge page size
    pages.hugetlbfs = true;
  } else if (static_cast<uint64_t>(fs.f_type) == TMPFS_MAGIC && TmpfsHuge(st.st_dev)) {
    pages.size = PmdPageSize();
  }
  return pages;
}

bool PoolDevice::Contains(const void *p, uint64_t len) const {
  auto *b = static_cast<const uint8_t *>(p);
  return b >= base_ && len <= mapped_ && b - base_ <= static_cast<ptrdiff_t>(mapped_ - len);
}

}  // namespace maru
