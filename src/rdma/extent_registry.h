// ExtentRegistry: maru-agent's UCX registrations of single extents, so that
// a remote key reaches exactly what a grant names (on transports that
// enforce keys: see docs/security.md). Read grants get keys without remote
// write access. A registration is shared by the grants for the same extent
// and mode, and unmapped once the last of them is over.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "util/status.h"

namespace maru {

// The writer (session, uid) a writable registration belongs to.
struct ExtentWriter {
  uint64_t session = 0;
  uint32_t uid = 0;
  bool operator==(const ExtentWriter &) const = default;
};

class ExtentRegistry {
 public:
  explicit ExtentRegistry(ucp_context_h context, size_t max_entries = 65536)
      : context_(context), max_entries_(max_entries) {}
  ~ExtentRegistry();
  ExtentRegistry(const ExtentRegistry &) = delete;
  ExtentRegistry &operator=(const ExtentRegistry &) = delete;

  using Where = std::tuple<uint32_t, uint64_t, uint64_t, bool>;  // device, offset, length, rw

  // The packed remote key for `length` bytes at `base` + `offset` of device
  // `device`, registered now or earlier, kept at least until `until_ms`.
  using Writer = ExtentWriter;

  // `writer`: whose a writable registration is ({} for a read one).
  Result<const std::vector<uint8_t> *> Key(uint32_t device, uint8_t *base, uint64_t offset,
                                           uint64_t length, bool writable, int64_t until_ms,
                                           Writer writer = {});
  // Unmaps the registrations whose time is over at `now_ms`.
  void Expire(int64_t now_ms);
  // The writable registrations and the writer each belongs to.
  std::vector<std::pair<Where, Writer>> Writable() const;
  // Unmaps one registration now (its reservation ended).
  void Drop(const Where &where);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    ucp_mem_h memh = nullptr;
    std::vector<uint8_t> rkey;
    int64_t until_ms = 0;
    Writer writer;
  };

  ucp_context_h context_;
  size_t max_entries_;
  std::map<Where, Entry> entries_;
};

}  // namespace maru
