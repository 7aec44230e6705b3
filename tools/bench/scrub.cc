// What zeroing an extent for a writer without pool access costs
// (src/meta/pool_scrub.h): the store of one chunk into a tmpfs pool file
// (a copy of SIZE bytes into a mapping of it, as a writer does), without
// and with the server's ZeroRange of the extent first (its first call maps
// the device, as the server's does once). Prints both times
// and their ratio; the extent is the same each round, as a reused one is.
//
//   bench_scrub POOLFILE [SIZE_MIB] [ROUNDS]   (the pool is made, then removed)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "alloc/pool_device.h"
#include "meta/pool_scrub.h"

namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: bench_scrub POOLFILE [SIZE_MIB] [ROUNDS]\n"), 2;
  const char *path = argv[1];
  const uint64_t size = (argc > 2 ? strtoull(argv[2], nullptr, 10) : 32) << 20;
  const int rounds = argc > 3 ? atoi(argv[3]) : 20;
  maru::FormatOptions format;
  format.size = size + (64u << 10);  // the superblock's unit before the data
  maru::Result<maru::Superblock> sb = maru::FormatPool(path, format);
  if (!sb.ok()) return fprintf(stderr, "%s\n", sb.status().ToString().c_str()), 1;
  const uint64_t at = sb->data_offset;
  int fd = open(path, O_RDWR);
  if (fd < 0) return perror(path), 1;
  auto *base = static_cast<uint8_t *>(
      mmap(nullptr, at + size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0));
  if (base == MAP_FAILED) return perror("mmap"), 1;
  uint8_t *pool = base + at;
  std::vector<uint8_t> chunk(size, 0x5a);
  double plain = 0, zeroed = 0, zeroing = 0;
  for (int i = 0; i < rounds; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    memcpy(pool, chunk.data(), size);
    auto t1 = std::chrono::steady_clock::now();
    maru::Status s = maru::ZeroRange(path, at, size);
    if (!s.ok()) return fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
    zeroing += Seconds(std::chrono::steady_clock::now() - t1);
    memcpy(pool, chunk.data(), size);
    auto t2 = std::chrono::steady_clock::now();
    plain += Seconds(t1 - t0);
    zeroed += Seconds(t2 - t1);
  }
  printf(
      "store of %llu MiB: %.2f ms as is, %.2f ms zeroed first (%.2f ms of it zeroing): "
      "ratio %.2f\n",
      static_cast<unsigned long long>(size >> 20), plain / rounds * 1e3, zeroed / rounds * 1e3,
      zeroing / rounds * 1e3, zeroed / plain);
  munmap(base, at + size);
  close(fd);
  unlink(path);
  return 0;
}
