// The inodes by number, owned: an open-addressing table of Inode pointers
// keyed by each inode's own number. A slot is one pointer (8 bytes, about
// 13 an inode at the table's load) where std::unordered_map spends about
// 40 (a heap node and a bucket), which matters at ten million chunks.
// Linear probing; a removal shifts the entries after it back, so there are
// no tombstones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "meta/inode.h"
#include "util/flat_map.h"

namespace maru {

class InodeTable {
 public:
  InodeTable() = default;
  InodeTable(const InodeTable &) = delete;
  InodeTable &operator=(const InodeTable &) = delete;
  ~InodeTable() {
    for (Inode *p : slots_) delete p;
  }

  Inode *Find(uint64_t ino) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = Home(ino);; i = (i + 1) & mask_) {
      Inode *p = slots_[i];
      if (!p || p->ino == ino) return p;
    }
  }

  // Takes ownership; one already there under the same number is deleted.
  Inode *Insert(std::unique_ptr<Inode> inode) {
    if ((size_ + 1) * 4 > slots_.size() * 3) Grow();
    Inode *raw = inode.release();
    for (size_t i = Home(raw->ino);; i = (i + 1) & mask_) {
      if (!slots_[i]) {
        slots_[i] = raw;
        ++size_;
        return raw;
      }
      if (slots_[i]->ino == raw->ino) {
        delete slots_[i];
        slots_[i] = raw;
        return raw;
      }
    }
  }

  // Gives up the inode `ino`; null if there is none.
  std::unique_ptr<Inode> Take(uint64_t ino) {
    if (slots_.empty()) return nullptr;
    size_t i = Home(ino);
    while (slots_[i] && slots_[i]->ino != ino) i = (i + 1) & mask_;
    if (!slots_[i]) return nullptr;
    std::unique_ptr<Inode> out(slots_[i]);
    slots_[i] = nullptr;
    --size_;
    // Entries after the hole that could not sit in their home slot (or
    // nearer it) because the hole was taken move back into it.
    for (size_t j = (i + 1) & mask_; slots_[j]; j = (j + 1) & mask_) {
      const size_t home = Home(slots_[j]->ino);
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        slots_[j] = nullptr;
        i = j;
      }
    }
    return out;
  }

  size_t size() const { return size_; }
  // Room for `n` inodes without growing again.
  void Reserve(size_t n) {
    while (n * 4 > slots_.size() * 3) Grow();
  }

  template <typename F>
  void ForEach(F &&f) const {
    for (Inode *p : slots_)
      if (p) f(*p);
  }

 private:
  size_t Home(uint64_t ino) const { return HomeSlot(ino, shift_, mask_); }

  void Grow() {
    std::vector<Inode *> old = std::move(slots_);
    const size_t capacity = old.empty() ? 16 : old.size() * 2;
    slots_.assign(capacity, nullptr);
    mask_ = capacity - 1;
    shift_ = 64;
    for (size_t c = capacity; c > 1; c >>= 1) --shift_;
    for (Inode *p : old) {
      if (!p) continue;
      size_t i = Home(p->ino);
      while (slots_[i]) i = (i + 1) & mask_;
      slots_[i] = p;
    }
  }

  std::vector<Inode *> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  unsigned shift_ = 64;
};

}  // namespace maru
