// In-memory form of a file or directory. The namespace owns inodes; the
// durable form is schema::Inode (meta/records.h), written through MetaDb.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "alloc/extent.h"
#include "maru.pb.h"

namespace maru {

// One generation of a file's content. Generations are unique across the
// whole server, so a generation names a set of extents unambiguously.
struct Version {
  uint64_t gen = 0;
  uint64_t size = 0;
  ExtentList extents;
  rpc::ChecksumType checksum_type = rpc::CHECKSUM_NONE;
  uint64_t checksum = 0;
  uint64_t writer_session = 0;  // reservations only
  uint32_t writer_uid = 0;      // reservations only
  uint64_t request_id = 0;      // reservations only
  int64_t created_ns = 0;
  uint32_t parts = 0;      // layer-wise: written in this many equal parts (0, 1: one)
  uint32_t published = 0;  // reservations only: parts published so far (not persisted)
};

struct Inode {
  uint64_t ino = 0;
  uint64_t parent = 0;
  std::string name;
  uint32_t mode = 0;
  uint32_t uid = 0, gid = 0;
  int64_t atime_ns = 0, mtime_ns = 0, ctime_ns = 0;
  std::optional<Version> current;  // sealed content
  std::optional<Version> pending;  // reservation being written
  uint64_t parent_chunk = 0;
  bool pinned = false;
  int64_t pin_expiry_ns = 0;
  uint64_t hits = 0;
  std::map<std::string, uint64_t, std::less<>> children;  // directories only
  uint32_t subdirs = 0;                                   // directories only: for nlink

  bool is_dir() const { return S_ISDIR(mode); }
  bool is_file() const { return S_ISREG(mode); }
};

}  // namespace maru
