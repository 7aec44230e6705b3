// A hash map from nonzero 64-bit keys (inode numbers) to small values, kept
// in one array: open addressing with linear probing, a removal shifting the
// entries after it back (no tombstones). A slot is the key and the value
// (24 bytes for a 16-byte value, about 35 an entry at the table's load)
// where std::unordered_map spends about 56 (a heap node and a bucket): for
// per-chunk state at ten million chunks. Pointers to values are valid until
// the next insert or erase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace maru {

// The home slot of a key in a table of mask + 1 slots (1 << (64 - shift)).
// Numbers made one after another (inode numbers, generations) go to runs of
// 16 neighbouring slots, the runs spread by a multiplicative hash: a start,
// which enters millions of them in the order they were made, then touches
// each cache line and page of the table a few times instead of once an
// entry at random (at ten million chunks the tables are hundreds of MB).
inline size_t HomeSlot(uint64_t key, unsigned shift, size_t mask) {
  const uint64_t run = ((key >> 4) * 0x9E3779B97F4A7C15ull) >> shift;
  return static_cast<size_t>((run << 4) | (key & 15)) & mask;
}

template <typename V>
class FlatMap {
 public:
  V *find(uint64_t key) {
    const size_t i = Slot(key);
    return slots_.empty() || slots_[i].key == 0 ? nullptr : &slots_[i].value;
  }
  const V *find(uint64_t key) const { return const_cast<FlatMap *>(this)->find(key); }
  bool contains(uint64_t key) const { return find(key) != nullptr; }

  // The value under `key`, made from `v` if there was none; true if made.
  // `key` must not be 0.
  std::pair<V *, bool> try_emplace(uint64_t key, const V &v) {
    if ((size_ + 1) * 5 > slots_.size() * 4) Grow();
    const size_t i = Slot(key);
    if (slots_[i].key != 0) return {&slots_[i].value, false};
    slots_[i] = {key, v};
    ++size_;
    return {&slots_[i].value, true};
  }

  // How many went: 0 or 1.
  size_t erase(uint64_t key) {
    if (slots_.empty()) return 0;
    size_t i = Slot(key);
    if (slots_[i].key == 0) return 0;
    slots_[i].key = 0;
    --size_;
    // Entries after the hole that could not sit in their home slot (or
    // nearer it) because the hole was taken move back into it.
    for (size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const size_t home = Home(slots_[j].key);
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        slots_[j].key = 0;
        i = j;
      }
    }
    return 1;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Room for `n` entries without growing (a start enters millions).
  void reserve(size_t n) {
    while (n * 5 > slots_.size() * 4) Grow();
  }

 private:
  struct Entry {
    uint64_t key = 0;  // 0: empty
    V value{};
  };

  size_t Home(uint64_t key) const { return HomeSlot(key, shift_, mask_); }
  // The slot holding `key`, or the empty one where it would go.
  size_t Slot(uint64_t key) const {
    if (slots_.empty()) return 0;
    size_t i = Home(key);
    while (slots_[i].key != 0 && slots_[i].key != key) i = (i + 1) & mask_;
    return i;
  }

  void Grow() {
    std::vector<Entry> old = std::move(slots_);
    const size_t capacity = old.empty() ? 16 : old.size() * 2;
    slots_.assign(capacity, Entry{});
    mask_ = capacity - 1;
    shift_ = 64;
    for (size_t c = capacity; c > 1; c >>= 1) --shift_;
    for (const Entry &e : old)
      if (e.key != 0) slots_[Slot(e.key)] = e;
  }

  std::vector<Entry> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  unsigned shift_ = 64;
};

}  // namespace maru
