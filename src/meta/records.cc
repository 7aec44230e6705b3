#include "meta/records.h"

namespace maru {
namespace {

// Checksum types are kept as numbers on disk: the wire's, which therefore
// never change.
static_assert(rpc::CHECKSUM_NONE == 0 && rpc::CHECKSUM_XXH3 == 1 && rpc::CHECKSUM_CRC32C == 2);

uint32_t ChecksumToRecord(rpc::ChecksumType type) {
  return static_cast<uint32_t>(type);
}

rpc::ChecksumType ChecksumFromRecord(uint32_t type) {
  return static_cast<rpc::ChecksumType>(type);
}

void ToRecordVersion(const Version &v, schema::Version *out) {
  out->set_gen(v.gen);
  out->set_size(v.size);
  ToRecordExtents(v.extents, out->mutable_extents());
  out->set_checksum_type(ChecksumToRecord(v.checksum_type));
  out->set_checksum(v.checksum);
  out->set_writer_session(v.writer_session);
  out->set_writer_uid(v.writer_uid);
  out->set_request_id(v.request_id);
  out->set_created_ns(v.created_ns);
  out->set_parts(v.parts);
  if (v.writer_session) out->set_charged_uid(v.charged_uid);
}

Version FromRecordVersion(const schema::Version &r) {
  Version v;
  v.gen = r.gen();
  v.size = r.size();
  v.extents = FromRecordExtents(r.extents());
  v.checksum_type = ChecksumFromRecord(r.checksum_type());
  v.checksum = r.checksum();
  v.writer_session = r.writer_session();
  v.writer_uid = r.writer_uid();
  v.request_id = r.request_id();
  v.created_ns = r.created_ns();
  v.parts = static_cast<uint16_t>(std::min<uint32_t>(r.parts(), UINT16_MAX));
  v.charged_uid = r.has_charged_uid() ? r.charged_uid() : r.writer_uid();
  return v;
}

}  // namespace

void ToRecordExtents(const ExtentList &extents,
                     google::protobuf::RepeatedPtrField<schema::Extent> *out) {
  out->Reserve(static_cast<int>(extents.size()));
  for (const Extent &e : extents) {
    schema::Extent *x = out->Add();
    x->set_device(e.device);
    x->set_offset(e.offset);
    x->set_length(e.length);
  }
}

ExtentList FromRecordExtents(const google::protobuf::RepeatedPtrField<schema::Extent> &in) {
  ExtentList out;
  out.reserve(in.size());
  for (const schema::Extent &x : in) out.push_back(Extent{x.device(), x.offset(), x.length()});
  return out;
}

schema::Inode ToRecord(const Inode &inode) {
  schema::Inode r;
  r.set_ino(inode.ino);
  r.set_parent(inode.parent);
  r.set_name(inode.name);
  r.set_mode(inode.mode);
  r.set_uid(inode.uid);
  r.set_gid(inode.gid);
  r.set_atime_ns(inode.atime_ns);
  r.set_mtime_ns(inode.mtime_ns);
  r.set_ctime_ns(inode.ctime_ns);
  if (inode.current) ToRecordVersion(*inode.current, r.mutable_current());
  if (inode.pending) ToRecordVersion(*inode.pending, r.mutable_pending());
  r.set_parent_chunk(inode.parent_chunk);
  r.set_pinned(inode.pinned);
  r.set_pin_expiry_ns(inode.pin_expiry_ns);
  r.set_hits(inode.hits);
  return r;
}

Inode FromRecord(const schema::Inode &r) {
  Inode inode;
  inode.ino = r.ino();
  inode.parent = r.parent();
  inode.name = r.name();
  inode.mode = r.mode();
  inode.uid = r.uid();
  inode.gid = r.gid();
  inode.atime_ns = r.atime_ns();
  inode.mtime_ns = r.mtime_ns();
  inode.ctime_ns = r.ctime_ns();
  if (r.has_current()) inode.current = FromRecordVersion(r.current());
  if (r.has_pending()) inode.pending = FromRecordVersion(r.pending());
  inode.parent_chunk = r.parent_chunk();
  inode.pinned = r.pinned();
  inode.pin_expiry_ns = r.pin_expiry_ns();
  inode.hits = r.hits();
  return inode;
}

schema::Retired ToRetiredRecord(uint64_t gen, const ExtentList &extents, const Version *writing,
                                uint64_t ino) {
  schema::Retired record;
  record.set_gen(gen);
  record.set_ino(ino);
  ToRecordExtents(extents, record.mutable_extents());
  if (writing) {
    record.set_writer_session(writing->writer_session);
    record.set_writer_uid(writing->writer_uid);
    record.set_charged_uid(writing->charged_uid);
  }
  return record;
}

}  // namespace maru
