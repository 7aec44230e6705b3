// How the engine describes what it holds in replies: attributes, devices,
// and a chunk's placement (extents, lease, parts).
#include "meta/engine_op.h"
#include "meta/meta_engine.h"
#include "meta/pool_identity.h"

namespace maru {

void MetaEngine::FillAttr(const Inode &inode, rpc::Attr *a) const {
  a->set_ino(inode.ino);
  a->set_parent(inode.parent ? inode.parent : inode.ino);
  a->set_mode(inode.mode);
  a->set_uid(inode.uid);
  a->set_gid(inode.gid);
  a->set_atime_ns(inode.atime_ns);
  a->set_mtime_ns(inode.mtime_ns);
  a->set_ctime_ns(inode.ctime_ns);
  a->set_hits(inode.hits);
  a->set_pinned(inode.pinned);
  a->set_pin_expiry_ns(inode.pin_expiry_ns);
  a->set_parent_chunk(inode.parent_chunk);
  if (inode.is_dir()) {
    a->set_state(rpc::DIRECTORY);
    a->set_nlink(2 + inode.subdirs);
    a->set_size(4096);
    return;
  }
  a->set_nlink(1);
  const Version *v = inode.current ? &*inode.current : inode.pending ? &*inode.pending : nullptr;
  a->set_state(inode.current ? rpc::SEALED : rpc::WRITING);
  if (!v) return;
  a->set_gen(v->gen);
  // Until sealed, nobody but its writer knows how much of it is written.
  a->set_size(inode.current ? v->size : 0);
  a->set_allocated(TotalLength(v->extents));
  a->set_checksum_type(v->checksum_type);
  a->set_checksum(v->checksum);
  a->set_leases(inode.current ? space_.refs(inode.current->gen) : 0);
}

void MetaEngine::FillDevice(const SpaceManager::Device &d, rpc::Device *dev) const {
  dev->set_index(d.index);
  dev->set_path(d.path);
  dev->set_size(d.allocator.capacity());
  dev->set_used(d.allocator.capacity() - d.allocator.free_bytes());
  dev->set_unit(d.allocator.unit());
  dev->set_epoch(d.superblock.epoch);
  dev->set_device_uuid(UuidBytes(d.superblock.device_uuid));
  if (auto it = agents_.find(d.index); it != agents_.end()) dev->set_agent(it->second.address);
}

void MetaEngine::FillChunk(const Inode &inode, const Version &v, uint64_t lease,
                           rpc::ChunkReply *rep, bool slim) const {
  rpc::Attr *a = rep->mutable_attr();
  if (slim) {
    a->set_ino(inode.ino);
    a->set_state(inode.current ? rpc::SEALED : rpc::WRITING);
    a->set_checksum_type(v.checksum_type);
    a->set_checksum(v.checksum);
  } else {
    FillAttr(inode, a);
    a->set_allocated(TotalLength(v.extents));
  }
  // A writer's reply describes its reservation, not the sealed version.
  a->set_gen(v.gen);
  a->set_size(v.size);
  ToWireExtents(v.extents, rep->mutable_extents());
  rep->set_lease(lease);
  if (v.parts > 1) rep->set_parts(v.parts);
}

}  // namespace maru
