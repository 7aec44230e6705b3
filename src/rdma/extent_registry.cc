#include "rdma/extent_registry.h"

#include "rdma/ucx_wire.h"
#include "rdma/ucx_worker.h"

namespace maru {

ExtentRegistry::~ExtentRegistry() {
  for (auto &[where, e] : entries_) ucp_mem_unmap(context_, e.memh);
}

Result<const std::vector<uint8_t> *> ExtentRegistry::Key(uint32_t device, uint8_t *base,
                                                         uint64_t offset, uint64_t length,
                                                         bool writable, int64_t until_ms,
                                                         Writer writer) {
  const Where where{device, offset, length, writable};
  if (auto it = entries_.find(where); it != entries_.end()) {
    if (it->second.writer == writer) {
      it->second.until_ms = std::max(it->second.until_ms, until_ms);
      return &it->second.rkey;
    }
    Drop(where);  // an earlier writer's, whose reservation ended: not shared
  }
  if (entries_.size() >= max_entries_)
    return Status::Error(EBUSY, "too many extents registered; try again later");
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_PROT;
  mp.address = base + offset;
  mp.length = length;
  mp.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE |
            UCP_MEM_MAP_PROT_REMOTE_READ | (writable ? UCP_MEM_MAP_PROT_REMOTE_WRITE : 0);
  Entry e;
  e.until_ms = until_ms;
  e.writer = writer;
  ucs_status_t st = ucp_mem_map(context_, &mp, &e.memh);
  if (st != UCS_OK) return Status::Error(UcsErrno(st), "cannot register an extent with UCX");
  void *packed = nullptr;
  size_t size = 0;
  st = ucp_rkey_pack(context_, e.memh, &packed, &size);
  if (st != UCS_OK || size > wire::kMaxRkeyBytes) {
    if (st == UCS_OK) ucp_rkey_buffer_release(packed);
    ucp_mem_unmap(context_, e.memh);
    return Status::Error(EIO, "cannot pack a remote key");
  }
  e.rkey.assign(static_cast<uint8_t *>(packed), static_cast<uint8_t *>(packed) + size);
  ucp_rkey_buffer_release(packed);
  return &entries_.emplace(where, std::move(e)).first->second.rkey;
}

void ExtentRegistry::Expire(int64_t now_ms) {
  std::erase_if(entries_, [&](auto &item) {
    if (item.second.until_ms > now_ms) return false;
    ucp_mem_unmap(context_, item.second.memh);
    return true;
  });
}

std::vector<std::pair<ExtentRegistry::Where, ExtentRegistry::Writer>> ExtentRegistry::Writable()
    const {
  std::vector<std::pair<Where, Writer>> out;
  for (const auto &[where, e] : entries_)
    if (std::get<3>(where)) out.emplace_back(where, e.writer);
  return out;
}

void ExtentRegistry::Drop(const Where &where) {
  auto it = entries_.find(where);
  if (it == entries_.end()) return;
  ucp_mem_unmap(context_, it->second.memh);
  entries_.erase(it);
}

}  // namespace maru
