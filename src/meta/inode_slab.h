// Where inodes live: fixed-size slots carved from 4 MiB blocks, reused
// through a free list. An inode from malloc costs its size rounded up to
// 16 plus an 8-byte header (232 -> 240 bytes); from a slot, its size: 80 MB
// less at ten million chunks. Blocks are kept for reuse, never returned:
// the memory follows the most inodes there ever were, as malloc's mostly
// does. Under ASan inodes come from the heap, so its checks still see them.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace maru {

template <size_t kSize, size_t kAlign>
class SlotArena {
 public:
  static_assert(kSize >= sizeof(void *) && kSize % kAlign == 0);

  void *Allocate() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_) {
      Free *slot = free_;
      free_ = slot->next;
      return slot;
    }
    if (next_ == end_) NewBlock();
    void *slot = next_;
    next_ += kSize;
    return slot;
  }

  void Release(void *p) {
    std::lock_guard<std::mutex> lock(mu_);
    free_ = new (p) Free{free_};
  }

 private:
  static constexpr size_t kBlock = 4u << 20;
  struct Free {
    Free *next;
  };

  void NewBlock() {
    void *block = ::operator new (kBlock, std::align_val_t{kAlign});
    blocks_.push_back(block);
    next_ = static_cast<std::byte *>(block);
    end_ = next_ + kBlock / kSize * kSize;
  }

  std::mutex mu_;
  Free *free_ = nullptr;
  std::byte *next_ = nullptr, *end_ = nullptr;
  std::vector<void *> blocks_;  // kept: freed slots are reused
};

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kInodeSlab = false;
#else
inline constexpr bool kInodeSlab = true;
#endif

}  // namespace maru
