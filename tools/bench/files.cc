// maru-bench files: write and read whole files in a directory, so that a
// maru-fuse mount and tmpfs are measured the same way in one run.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>

#include "bench/common.h"
#include "common/json_output.h"
#include "util/units.h"

namespace maru::bench {
namespace {

constexpr uint64_t kBlock = 1 << 20;  // what cp and most applications use

Status WriteFile(const std::string &path, const std::vector<uint8_t> &data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(errno, "cannot create " + path);
  for (uint64_t at = 0; at < data.size(); at += kBlock) {
    const uint64_t n = std::min<uint64_t>(kBlock, data.size() - at);
    if (write(fd, data.data() + at, n) != static_cast<ssize_t>(n)) {
      const int err = errno;
      close(fd);
      return Status::Error(err ? err : EIO, "cannot write " + path);
    }
  }
  // close() publishes a maru file: it is part of the write.
  if (close(fd) < 0) return Status::Error(errno, "cannot close " + path);
  return Status::Ok();
}

Status ReadFile(const std::string &path, std::vector<uint8_t> *into) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(errno, "cannot open " + path);
  // Cold: what the writer left in the page cache is dropped first.
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  uint64_t at = 0;
  for (;;) {
    const uint64_t n = std::min<uint64_t>(kBlock, into->size() - at);
    ssize_t got = read(fd, into->data() + at, n);
    if (got < 0) {
      const int err = errno;
      close(fd);
      return Status::Error(err, "cannot read " + path);
    }
    at += static_cast<uint64_t>(got);
    if (got == 0 || at == into->size()) break;
  }
  close(fd);
  if (at != into->size()) return Status::Error(EIO, path + " is short");
  return Status::Ok();
}

}  // namespace

int RunFiles(int argc, char **argv) {
  std::string dir;
  uint64_t size = 32ull << 20;
  int64_t count = 8;
  bool json = false;
  Flags flags("maru-bench files --dir DIR [--size SIZE] [--count N] [--json]",
              "Writes N files of SIZE in 1 MiB write() calls, closes them, then reads each\n"
              "back cold (its cached pages dropped first). Run it on a maru-fuse mount and on\n"
              "tmpfs to compare them.");
  flags.String("dir", &dir, "directory to write the files in (created)");
  flags.Size("size", &size, "file size");
  flags.Int("count", &count, "files");
  flags.Bool("json", &json, "end with one JSON line of the figures");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  if (dir.empty() || size == 0 || size > (16ull << 30) || count <= 0)
    return Fail("need --dir, --size up to 16G and a positive --count");
  mkdir(dir.c_str(), 0755);

  std::vector<uint8_t> data = TouchedBuffer(size, 5), into = TouchedBuffer(size, 6);
  std::vector<double> write_gbps, read_gbps;
  for (int64_t i = 0; i < count; ++i) {
    const std::string path = dir + "/f" + std::to_string(i);
    int64_t t0 = MonotonicNs();
    Status s = WriteFile(path, data);
    const int64_t t1 = MonotonicNs();
    if (s.ok()) s = ReadFile(path, &into);
    const int64_t t2 = MonotonicNs();
    if (s.ok() && memcmp(into.data(), data.data(), size) != 0)
      s = Status::Error(EIO, path + " reads back wrong");
    if (!s.ok()) {
      unlink(path.c_str());
      return Fail(s.message());
    }
    write_gbps.push_back(static_cast<double>(size) / static_cast<double>(t1 - t0));
    read_gbps.push_back(static_cast<double>(size) / static_cast<double>(t2 - t1));
    unlink(path.c_str());
  }
  const double w = Quantile(write_gbps, 0.5), r = Quantile(read_gbps, 0.5);
  printf("%s: write %.2f GB/s, cold read %.2f GB/s (%s files)\n", dir.c_str(), w, r,
         FormatSize(size).c_str());
  if (json)
    PrintJson({{"dir", dir},
               {"size", size},
               {"write_gbps", Rounded(w, 3)},
               {"read_gbps", Rounded(r, 3)}});
  return 0;
}

}  // namespace maru::bench
