// Where inodes live: fixed-size slots carved from 4 MiB blocks, reused
// through a free list. An inode from malloc costs its size rounded up to
// 16 plus an 8-byte header (232 -> 240 bytes); from a slot, its size: 80 MB
// less at ten million chunks. Blocks are kept for reuse, never returned:
// the memory follows the most inodes there ever were, as malloc's mostly
// does. Under ASan inodes come from the heap, so its checks still see them.
// An arena must outlive the threads that take slots from it (InodeArena is
// never destroyed).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

#include "util/mutex.h"

namespace maru {

template <size_t kSize, size_t kAlign>
class SlotArena {
 public:
  static_assert(kSize >= sizeof(void *) && kSize % kAlign == 0);

  // Each thread carves slots from a run of its own (kRunSlots, taken under
  // the lock): a start decodes millions of inodes on several threads, which
  // would otherwise take the lock for each and write into each other's
  // cache lines. What is left of a run goes to the free list when its
  // thread ends.
  SlotArena() = default;
  // Every thread but this one must be done with it.
  ~SlotArena() {
    if (t_run.arena == this) t_run = Run{};
    for (void *block : blocks_) ::operator delete (block, std::align_val_t{kAlign});
  }
  SlotArena(const SlotArena &) = delete;
  SlotArena &operator=(const SlotArena &) = delete;

  void *Allocate() EXCLUDES(mu_) {
    Run &run = t_run;
    if (run.arena != this) run.Give(this);
    if (run.next != run.end) return run.Take();
    MutexLock lock(&mu_);
    if (free_) {
      Free *slot = free_;
      free_ = slot->next;
      return slot;
    }
    if (next_ == end_) NewBlock();
    run.next = next_;
    run.end = std::min(next_ + kRunSlots * kSize, end_);
    next_ = run.end;
    return run.Take();
  }

  void Release(void *p) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    free_ = new (p) Free{free_};
  }

 private:
  static constexpr size_t kBlock = 4u << 20;
  static constexpr size_t kRunSlots = 64;
  struct Free {
    Free *next;
  };
  // A thread's slots not handed out yet, of `arena`.
  struct Run {
    SlotArena *arena = nullptr;
    std::byte *next = nullptr, *end = nullptr;
    ~Run() { Give(nullptr); }
    void *Take() {
      void *slot = next;
      next += kSize;
      return slot;
    }
    // Returns what is left to its arena, and starts taking from `to`.
    void Give(SlotArena *to) {
      if (arena) {
        MutexLock lock(&arena->mu_);
        for (; next != end; next += kSize) arena->free_ = new (next) Free{arena->free_};
      }
      arena = to;
      next = end = nullptr;
    }
  };
  static inline thread_local Run t_run;

  void NewBlock() REQUIRES(mu_) {
    void *block = ::operator new (kBlock, std::align_val_t{kAlign});
    blocks_.push_back(block);
    next_ = static_cast<std::byte *>(block);
    end_ = next_ + kBlock / kSize * kSize;
  }

  Mutex mu_;
  Free *free_ GUARDED_BY(mu_) = nullptr;
  std::byte *next_ GUARDED_BY(mu_) = nullptr;
  std::byte *end_ GUARDED_BY(mu_) = nullptr;
  std::vector<void *> blocks_ GUARDED_BY(mu_);  // kept: freed slots are reused
};

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kInodeSlab = false;
#else
inline constexpr bool kInodeSlab = true;
#endif

}  // namespace maru
