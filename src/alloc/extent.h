// An extent: a run of bytes on one pool device; and a chunk's list of them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>

namespace maru {

struct Extent {
  uint32_t device = 0;
  uint64_t offset = 0;  // from the start of the device (superblock included)
  uint64_t length = 0;

  uint64_t end() const { return offset + length; }
  bool operator==(const Extent &) const = default;
};

// The extents of a chunk, in order: a vector that holds one extent in
// place. Almost every chunk is one extent, which a std::vector would keep
// in a heap block of its own (32 bytes more a chunk, besides its 24): at
// ten million chunks that is 320 MB of the server's memory.
class ExtentList {
 public:
  using value_type = Extent;
  using size_type = size_t;
  using iterator = Extent *;
  using const_iterator = const Extent *;
  using reference = Extent &;
  using const_reference = const Extent &;

  ExtentList() = default;
  ExtentList(std::initializer_list<Extent> l) { assign(l.begin(), l.end()); }
  template <typename It>
  ExtentList(It first, It last) {
    assign(first, last);
  }
  ExtentList(const ExtentList &o) { assign(o.begin(), o.end()); }
  ExtentList(ExtentList &&o) noexcept { Steal(&o); }
  ExtentList &operator=(const ExtentList &o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  ExtentList &operator=(ExtentList &&o) noexcept {
    if (this != &o) {
      Release();
      Steal(&o);
    }
    return *this;
  }
  ~ExtentList() { Release(); }

  template <typename It>
  void assign(It first, It last) {
    clear();
    reserve(static_cast<size_t>(std::distance(first, last)));
    for (; first != last; ++first) push_back(*first);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  Extent *data() { return on_heap() ? u_.heap : &u_.one; }
  const Extent *data() const { return on_heap() ? u_.heap : &u_.one; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  Extent &operator[](size_t i) { return data()[i]; }
  const Extent &operator[](size_t i) const { return data()[i]; }
  Extent &front() { return data()[0]; }
  const Extent &front() const { return data()[0]; }
  Extent &back() { return data()[size_ - 1]; }
  const Extent &back() const { return data()[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= capacity_) return;
    auto *grown = new Extent[n];
    std::copy(begin(), end(), grown);
    const uint32_t size = size_;
    Release();
    u_.heap = grown;
    size_ = size;
    capacity_ = static_cast<uint32_t>(n);
  }
  void push_back(const Extent &e) {
    if (size_ == capacity_) reserve(size_t{capacity_} * 2);
    if (on_heap())
      u_.heap[size_] = e;
    else
      u_.one = e;
    ++size_;
  }
  template <typename... Args>
  Extent &emplace_back(Args &&...args) {
    push_back(Extent{std::forward<Args>(args)...});
    return back();
  }
  template <typename It>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - begin());
    const size_t n = static_cast<size_t>(std::distance(first, last));
    if (size_ + n > capacity_) reserve(std::max(size_ + n, size_t{capacity_} * 2));
    std::move_backward(begin() + at, end(), end() + n);
    std::copy(first, last, begin() + at);
    size_ += static_cast<uint32_t>(n);
    return begin() + at;
  }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - begin());
    const size_t n = static_cast<size_t>(last - first);
    std::move(begin() + at + n, end(), begin() + at);
    size_ -= static_cast<uint32_t>(n);
    return begin() + at;
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }

  bool operator==(const ExtentList &o) const {
    return size_ == o.size_ && std::equal(begin(), end(), o.begin());
  }

 private:
  bool on_heap() const { return capacity_ > 1; }
  void Release() {
    if (on_heap()) delete[] u_.heap;
    u_.heap = nullptr;
    size_ = 0;
    capacity_ = 1;
  }
  // Takes o's extents, leaving it empty.
  void Steal(ExtentList *o) {
    if (o->on_heap()) {
      u_.heap = o->u_.heap;
    } else {
      u_.one = o->u_.one;
    }
    size_ = o->size_;
    capacity_ = o->capacity_;
    o->u_.heap = nullptr;
    o->size_ = 0;
    o->capacity_ = 1;
  }

  union Storage {
    Extent one;  // capacity_ 1: the one extent, in place
    Extent *heap;
    Storage() : heap(nullptr) {}
  } u_;
  uint32_t size_ = 0;
  uint32_t capacity_ = 1;
};

inline uint64_t TotalLength(const ExtentList &extents) {
  uint64_t total = 0;
  for (const Extent &e : extents) total += e.length;
  return total;
}

}  // namespace maru
