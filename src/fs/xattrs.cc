#include "fs/xattrs.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>

#include "proto/conversions.h"
#include "util/checksum.h"

namespace maru {
namespace {

using Stub = rpc::Meta::Stub;
constexpr const char kPrefix[] = "user.maru.";
constexpr const char *kNames[] = {"extents", "generation", "state",    "leases",
                                  "pinned",  "hits",       "checksum", "parent"};

// `name` without the user.maru. prefix; false if it has none.
bool Strip(const std::string &name, std::string *suffix) {
  if (name.rfind(kPrefix, 0) != 0) return false;
  *suffix = name.substr(sizeof(kPrefix) - 1);
  return true;
}

std::string ExtentsValue(const rpc::AttrReply &rep) {
  std::string value;
  char buf[128];
  for (const auto &e : rep.extents()) {
    snprintf(buf, sizeof(buf), "%s%u:%" PRIu64 "+%" PRIu64, value.empty() ? "" : ",", e.device(),
             e.offset(), e.length());
    value += buf;
  }
  return value;
}

const char *StateValue(rpc::FileState state) {
  return state == rpc::SEALED ? "sealed" : state == rpc::WRITING ? "writing" : "directory";
}

// The value of the attribute `n` (without prefix) from GetAttr's reply.
int ValueOf(const std::string &n, const rpc::AttrReply &rep, std::string *value) {
  const rpc::Attr &a = rep.attr();
  if (n == "extents") {
    *value = ExtentsValue(rep);
  } else if (n == "generation") {
    *value = std::to_string(a.gen());
  } else if (n == "state") {
    *value = StateValue(a.state());
  } else if (n == "leases") {
    *value = std::to_string(a.leases());
  } else if (n == "pinned") {
    *value = a.pinned() ? "1" : "0";
  } else if (n == "hits") {
    *value = std::to_string(a.hits());
  } else if (n == "checksum") {
    if (a.checksum_type() == rpc::CHECKSUM_NONE) return -ENODATA;
    char buf[64];
    snprintf(buf, sizeof(buf), "%s:%016" PRIx64, ChecksumName(FromWire(a.checksum_type())),
             a.checksum());
    *value = buf;
  } else if (n == "parent") {
    if (rep.parent_path().empty()) return -ENODATA;
    *value = rep.parent_path();
  } else {
    return -ENODATA;
  }
  return 0;
}

}  // namespace

int Xattrs::Get(const rpc::Caller &caller, uint64_t ino, const std::string &name,
                std::string *value) {
  std::string n;
  if (!Strip(name, &n)) return -ENODATA;
  rpc::RefRequest r;
  r.mutable_ref()->set_ino(ino);
  r.set_with_extents(n == "extents" || n == "parent");
  rpc::AttrReply rep;
  if (int rc = client_->Call(&Stub::GetAttr, r, &rep, &caller); rc < 0) return rc;
  return ValueOf(n, rep, value);
}

std::string Xattrs::List() {
  std::string list;
  for (const char *n : kNames) {
    list += kPrefix;
    list += n;
    list += '\0';
  }
  return list;
}

int Xattrs::Set(const rpc::Caller &caller, uint64_t ino, const std::string &name,
                std::string value) {
  while (!value.empty() && (value.back() == '\n' || value.back() == '\0')) value.pop_back();
  std::string n;
  if (!Strip(name, &n)) return -ENOTSUP;
  if (n == "pinned") return Pin(caller, ino, value);
  if (n == "parent") return SetParent(caller, ino, value);
  return -EPERM;  // the others are read-only
}

int Xattrs::Remove(const rpc::Caller &caller, uint64_t ino, const std::string &name) {
  std::string n;
  if (!Strip(name, &n)) return -ENOTSUP;
  if (n == "parent") return SetParent(caller, ino, "");
  if (n == "pinned") return Pin(caller, ino, "0");
  return -EPERM;
}

int Xattrs::Pin(const rpc::Caller &caller, uint64_t ino, const std::string &value) {
  if (value != "0" && value != "1") return -EINVAL;
  rpc::PinRequest r;
  r.mutable_ref()->set_ino(ino);
  r.set_pin(value == "1");
  rpc::AttrReply rep;
  return client_->Call(&Stub::Pin, r, &rep, &caller);
}

int Xattrs::SetParent(const rpc::Caller &caller, uint64_t ino, const std::string &path) {
  rpc::SetAttrRequest r;
  r.mutable_ref()->set_ino(ino);
  r.set_set_parent(true);
  r.set_parent_path(path);
  rpc::AttrReply rep;
  return client_->Call(&Stub::SetAttr, r, &rep, &caller);
}

}  // namespace maru
