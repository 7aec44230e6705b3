// The user.maru.* extended attributes of maru-fuse: what each name shows of
// a chunk (read from the server's attributes) and the two that can be set
// (pinned, parent). See the table in docs/filesystem.md.
//
// Results are 0 or a negative errno: -ENODATA for a name a file does not
// have, -EPERM for setting a read-only user.maru.* name, -ENOTSUP for
// setting any other name.
#pragma once

#include <cstdint>
#include <string>

#include "client/meta_client.h"
#include "proto/maru.pb.h"

namespace maru {

class Xattrs {
 public:
  explicit Xattrs(MetaClient *client) : client_(client) {}

  int Get(const rpc::Caller &caller, uint64_t ino, const std::string &name, std::string *value);
  // The names, each followed by a NUL, as listxattr(2) returns them.
  static std::string List();
  int Set(const rpc::Caller &caller, uint64_t ino, const std::string &name, std::string value);
  int Remove(const rpc::Caller &caller, uint64_t ino, const std::string &name);

 private:
  int Pin(const rpc::Caller &caller, uint64_t ino, const std::string &value);
  int SetParent(const rpc::Caller &caller, uint64_t ino, const std::string &path);

  MetaClient *client_;
};

}  // namespace maru
