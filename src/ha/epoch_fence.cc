#include "ha/epoch_fence.h"

#include <string>

#include "util/cache_flush.h"

namespace maru {

EpochFence::EpochFence(std::atomic<uint64_t> *word, uint64_t ours, bool flush)
    : word_(word), ours_(ours), flush_(flush) {}

uint64_t EpochFence::Current() const {
  if (flush_) InvalidateRange(word_, sizeof(*word_));
  return word_->load(std::memory_order_acquire);
}

bool EpochFence::Ok() const {
  return Current() == ours_;
}

Status EpochFence::Raise() {
  uint64_t seen = Current();
  for (;;) {
    if (seen > ours_)
      return Status::Error(EEXIST, "the pool's epoch " + std::to_string(seen) +
                                       " is ahead of this leader's " + std::to_string(ours_) +
                                       ": refusing to lead");
    if (seen == ours_) return Status::Ok();
    if (word_->compare_exchange_weak(seen, ours_, std::memory_order_acq_rel)) break;
  }
  if (flush_) FlushRange(word_, sizeof(*word_));
  return Status::Ok();
}

}  // namespace maru
