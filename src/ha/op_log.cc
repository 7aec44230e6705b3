#include "ha/op_log.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "util/cache_flush.h"
#include "util/checksum.h"
#include "util/log.h"

namespace maru {
namespace {

constexpr uint64_t kMagic = 0x474f4c504f55524dull;  // "MRUOPLOG"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kPadLength = 0xffffffffu;  // fills the ring's tail up to the wrap

// One record: this, then `length` bytes, padded to 8.
struct RecordHeader {
  uint64_t seq;
  uint64_t epoch;
  uint32_t length;
  uint32_t crc;  // over seq, epoch, length, then the bytes
};
static_assert(sizeof(RecordHeader) == 24);

uint64_t Align8(uint64_t n) {
  return (n + 7) & ~uint64_t{7};
}

uint32_t RecordCrc(const RecordHeader &h, const void *data, size_t len) {
  uint32_t crc = Crc32c(&h, offsetof(RecordHeader, crc));
  return Crc32c(data, len, crc);
}

}  // namespace

// The first bytes of the region. The fixed part (up to fixed_crc) is
// written at formatting; the rest moves with every append.
struct OpLog::Header {
  uint64_t magic;
  uint32_t version;
  uint32_t fixed_crc;  // over magic, version, ring, generation, first_seq
  uint64_t ring;
  uint64_t generation;
  uint64_t first_seq;                              // the seq of the record at position 0
  alignas(64) std::atomic<uint64_t> reserved_pos;  // end of the record being written
  std::atomic<uint64_t> head_pos;                  // end of the last whole record
  std::atomic<uint64_t> head_seq;
  std::atomic<uint64_t> head_epoch;
  // Odd while the head's three words change: a reader of them retries.
  std::atomic<uint64_t> head_version;

  uint32_t FixedCrc() const {
    uint32_t crc = Crc32c(&magic, sizeof magic);
    crc = Crc32c(&version, sizeof version, crc);
    crc = Crc32c(&ring, sizeof ring, crc);
    crc = Crc32c(&generation, sizeof generation, crc);
    return Crc32c(&first_seq, sizeof first_seq, crc);
  }
};

OpLog::OpLog(uint8_t *base, uint64_t bytes, Coherence c)
    : base_(base), bytes_(bytes), ring_((bytes - kHeaderBytes) & ~uint64_t{7}), coherence_(c) {
  static_assert(sizeof(Header) <= kHeaderBytes);
}

Result<OpLog> OpLog::Attach(uint8_t *base, uint64_t bytes, Coherence coherence) {
  if (base == nullptr || bytes < kMinBytes)
    return Status::Error(EINVAL, "the replication log region is " + std::to_string(bytes) +
                                     " bytes; it needs at least " + std::to_string(kMinBytes));
  if (reinterpret_cast<uintptr_t>(base) % 64 != 0)
    return Status::Error(EINVAL, "the replication log region is not aligned to 64 bytes");
  return OpLog(base, bytes, coherence);
}

OpLog::Header *OpLog::header() const {
  return reinterpret_cast<Header *>(base_);
}

void OpLog::Publish(const void *p, size_t len) const {
  if (coherence_ == Coherence::kFlush) FlushRange(p, len);
}

void OpLog::Refresh(const void *p, size_t len) const {
  if (coherence_ == Coherence::kFlush) InvalidateRange(p, len);
}

void OpLog::Format(uint64_t generation, uint64_t first_seq) {
  Header *h = header();
  // A reader that sees the new generation must not see the old head with
  // it: the head goes back to the start first.
  h->reserved_pos.store(0, std::memory_order_relaxed);
  h->head_pos.store(0, std::memory_order_relaxed);
  h->head_seq.store(first_seq - 1, std::memory_order_relaxed);
  h->head_epoch.store(epoch_, std::memory_order_relaxed);
  h->head_version.store(0, std::memory_order_relaxed);
  h->magic = kMagic;
  h->version = kVersion;
  h->ring = ring_;
  h->generation = generation;
  h->first_seq = first_seq;
  h->fixed_crc = h->FixedCrc();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  Publish(h, sizeof *h);
  generation_ = generation;
  next_seq_ = first_seq;
  pos_ = 0;
}

Status OpLog::StartWriter(const OpLogPosition &last, uint64_t epoch, std::function<bool()> fence) {
  epoch_ = epoch;
  fence_ = std::move(fence);
  if (fence_ && !fence_())
    return Status::Error(EPERM, "not the leader: the replication log is not taken");
  Header *h = header();
  Refresh(h, sizeof *h);
  const bool valid = h->magic == kMagic && h->version == kVersion && h->ring == ring_ &&
                     h->fixed_crc == h->FixedCrc();
  if (valid && last.generation == h->generation && last.generation != 0 &&
      h->head_seq.load(std::memory_order_acquire) == last.seq &&
      h->head_pos.load(std::memory_order_acquire) == last.pos &&
      h->reserved_pos.load(std::memory_order_acquire) == last.pos) {
    generation_ = last.generation;
    next_seq_ = last.seq + 1;
    pos_ = last.pos;
    return Status::Ok();
  }
  // Our own generation number, never the region's: anything it held may
  // have been written by someone else.
  uint64_t generation = (valid ? h->generation : last.generation) + 1;
  if (generation <= last.generation) generation = last.generation + 1;
  if (valid)
    LOG_WARN(
        "replication log: its head is not this database's last write; formatted anew "
        "(generation %llu): standbys of the old one need a snapshot",
        static_cast<unsigned long long>(generation));
  Format(generation, last.seq + 1);
  return Status::Ok();
}

// Where a record of `len` bytes appended now starts: at pos_, or at the
// next wrap when it would not fit before the ring's end.
uint64_t OpLog::Placed(size_t len) const {
  const uint64_t off = pos_ % ring_;
  if (off + sizeof(RecordHeader) + Align8(len) <= ring_) return pos_;
  return pos_ + (ring_ - off);
}

OpLogPosition OpLog::After(size_t len) const {
  len = Stored(len);
  return {generation_, next_seq_, Placed(len) + sizeof(RecordHeader) + Align8(len)};
}

std::string OpLog::Mac(uint64_t generation, uint64_t seq, uint64_t epoch,
                       std::string_view data) const {
  std::string message(24, '\0');
  std::memcpy(message.data(), &generation, 8);
  std::memcpy(message.data() + 8, &seq, 8);
  std::memcpy(message.data() + 16, &epoch, 8);
  message.append(data);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char *>(message.data()), message.size(), mac, &len);
  return std::string(reinterpret_cast<const char *>(mac), kMacBytes);
}

Status OpLog::Append(std::string_view unsigned_data) {
  std::string signed_data;
  std::string_view data = unsigned_data;
  if (!key_.empty()) {
    signed_data.reserve(data.size() + kMacBytes);
    signed_data.append(data);
    signed_data.append(Mac(generation_, next_seq_, epoch_, unsigned_data));
    data = signed_data;
  }
  if (data.size() > max_record_bytes())
    return Status::Error(EMSGSIZE, "a metadata write of " + std::to_string(data.size()) +
                                       " bytes is larger than the replication log allows");
  if (fence_ && !fence_())
    return Status::Error(EPERM, "not the leader any more: the replication log is not written");
  Header *h = header();
  const uint64_t start = Placed(data.size());
  const uint64_t end = start + sizeof(RecordHeader) + Align8(data.size());
  // Readers check the reservation after copying a record out: whatever the
  // ring may overwrite from here on is announced before it is written.
  h->reserved_pos.store(end, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  Publish(&h->reserved_pos, sizeof(uint64_t));
  const uint64_t off = pos_ % ring_;
  if (start != pos_ && ring_ - off >= sizeof(RecordHeader)) {
    RecordHeader pad{0, epoch_, kPadLength, 0};
    pad.crc = RecordCrc(pad, nullptr, 0);
    std::memcpy(ring() + off, &pad, sizeof pad);
    Publish(ring() + off, sizeof pad);
  }
  RecordHeader rh{next_seq_, epoch_, static_cast<uint32_t>(data.size()), 0};
  rh.crc = RecordCrc(rh, data.data(), data.size());
  uint8_t *p = ring() + start % ring_;
  std::memcpy(p, &rh, sizeof rh);
  if (!data.empty()) std::memcpy(p + sizeof rh, data.data(), data.size());
  Publish(p, sizeof rh + data.size());
  // The head moves only once the whole record is out.
  const uint64_t version = h->head_version.load(std::memory_order_relaxed);
  h->head_version.store(version + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  h->head_seq.store(next_seq_, std::memory_order_relaxed);
  h->head_epoch.store(epoch_, std::memory_order_relaxed);
  h->head_pos.store(end, std::memory_order_release);
  h->head_version.store(version + 2, std::memory_order_release);
  Publish(&h->reserved_pos, 5 * sizeof(uint64_t));
  pos_ = end;
  ++next_seq_;
  return Status::Ok();
}

OpLogPosition OpLog::Head() const {
  Header *h = header();
  OpLogPosition head;
  // A bounded number of tries: a writer stuck mid-update (or a version
  // someone else wrote) yields a head that the records then fail to match.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    Refresh(h, sizeof *h);
    const uint64_t v1 = h->head_version.load(std::memory_order_acquire);
    head.pos = h->head_pos.load(std::memory_order_acquire);
    head.seq = h->head_seq.load(std::memory_order_acquire);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (v1 % 2 == 0 && h->head_version.load(std::memory_order_relaxed) == v1) break;
  }
  head.generation = h->generation;
  return head;
}

Result<OpLogRecord> OpLog::ReadNext(const OpLogPosition &at) const {
  Header *h = header();
  Refresh(h, sizeof *h);
  // A region no leader has written yet (mkpool leaves it zero).
  if (h->magic == 0) return Status::Error(ENODATA, "the replication log is not started yet");
  if (h->magic != kMagic || h->version != kVersion || h->ring != ring_ ||
      h->fixed_crc != h->FixedCrc())
    return Status::Error(EBADMSG, "the replication log's header does not verify");
  OpLogPosition from = at;
  // A reader with nothing yet starts at the beginning of a log that began
  // with the first write ever.
  if (from.generation == 0 && from.seq == 0 && h->first_seq == 1) from = {h->generation, 0, 0};
  if (from.generation != h->generation)
    return Status::Error(ESTALE, "the replication log was formatted anew: needs a snapshot");
  const uint64_t head = h->head_pos.load(std::memory_order_acquire);
  if (from.pos == head) return Status::Error(ENODATA, "no new record");
  if (from.pos > head) return Status::Error(EBADMSG, "the reader is past the log's head");
  if (head - from.pos > ring_) return Status::Error(ESTALE, "behind: needs a snapshot");
  uint64_t pos = from.pos;
  OpLogRecord rec;
  // Whatever the writer reserved since may have overwritten what we read:
  // asked before any verdict on the bytes, so that a record torn by a
  // writer lapping this reader reads as "behind", not as corruption.
  auto lapped = [&] {
    std::atomic_thread_fence(std::memory_order_acquire);
    Refresh(&h->reserved_pos, sizeof(uint64_t));
    return h->reserved_pos.load(std::memory_order_acquire) > from.pos + ring_;
  };
  auto refuse = [&](const std::string &why) {
    if (lapped()) return Status::Error(ESTALE, "behind: needs a snapshot");
    return Status::Error(EBADMSG, why);
  };
  for (int hop = 0; hop < 2; ++hop) {
    const uint64_t off = pos % ring_;
    if (ring_ - off < sizeof(RecordHeader)) {  // too little room for a header: wrapped
      pos += ring_ - off;
      continue;
    }
    RecordHeader rh;
    Refresh(ring() + off, sizeof rh);
    std::memcpy(&rh, ring() + off, sizeof rh);
    if (rh.length == kPadLength) {
      if (rh.seq != 0 || rh.crc != RecordCrc(rh, nullptr, 0))
        return refuse("a corrupted record in the replication log");
      pos += ring_ - off;
      continue;
    }
    if (rh.length > max_record_bytes() || off + sizeof rh + Align8(rh.length) > ring_ ||
        pos + sizeof rh + Align8(rh.length) > head)
      return refuse("a record in the replication log has a length it cannot have");
    Refresh(ring() + off + sizeof rh, rh.length);
    rec.data.assign(reinterpret_cast<const char *>(ring() + off + sizeof rh), rh.length);
    if (lapped()) return Status::Error(ESTALE, "behind: needs a snapshot");
    if (rh.crc != RecordCrc(rh, rec.data.data(), rec.data.size()))
      return Status::Error(EBADMSG, "a record in the replication log fails its crc");
    if (rh.seq != from.seq + 1)
      return Status::Error(EBADMSG, "the replication log skips from seq " +
                                        std::to_string(from.seq) + " to " + std::to_string(rh.seq));
    rec.generation = from.generation;
    rec.seq = rh.seq;
    rec.epoch = rh.epoch;
    rec.next_pos = pos + sizeof rh + Align8(rh.length);
    if (!key_.empty()) {
      if (rec.data.size() < kMacBytes)
        return Status::Error(EBADMSG, "a record in the replication log is not signed");
      const std::string_view body(rec.data.data(), rec.data.size() - kMacBytes);
      const std::string mac = Mac(rec.generation, rec.seq, rec.epoch, body);
      if (CRYPTO_memcmp(mac.data(), rec.data.data() + body.size(), kMacBytes) != 0)
        return Status::Error(EBADMSG,
                             "a record in the replication log is not signed by the pool's "
                             "servers (--replication-key-file): not applied");
      rec.data.resize(body.size());
    }
    return rec;
  }
  return Status::Error(EBADMSG, "the replication log wraps twice without a record");
}

}  // namespace maru
