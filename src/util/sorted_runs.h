// An ordered set kept as short sorted runs (arrays) indexed by their first
// element: what std::set does for ordered walks, inserts and erases, in
// about 17-34 bytes an element instead of std::set's 64 (a heap node with
// three pointers and a colour each). Made for orders of millions of small
// elements, such as the eviction order of every chunk.
//
// Inserting past the end (the usual case: a new last use) fills the last
// run; a full run splits in two; runs that thin out merge with a
// neighbour. Each operation is O(log(n / kRun) + kRun).
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <map>
#include <vector>

namespace maru {

template <typename T, size_t kRun = 128>
class SortedRuns {
 public:
  // False if `v` was there already.
  bool insert(const T &v) {
    if (runs_.empty()) {
      runs_.emplace(v, NewRun(v));
      ++size_;
      return true;
    }
    // Past the end, without a search (a start restores millions in order).
    if (Run &last = std::prev(runs_.end())->second; last.back() < v) {
      if (last.size() < kRun)
        last.push_back(v);
      else
        runs_.emplace_hint(runs_.end(), v, NewRun(v));
      ++size_;
      return true;
    }
    auto it = RunFor(v);
    Run *r = &it->second;
    auto pos = std::lower_bound(r->begin(), r->end(), v);
    if (pos != r->end() && *pos == v) return false;
    ++size_;
    if (r->size() == kRun) {
      it = Split(it, v);
      r = &it->second;
      pos = std::lower_bound(r->begin(), r->end(), v);
    }
    const bool first = pos == r->begin();
    r->insert(pos, v);
    if (first) Rekey(it);
    return true;
  }

  // How many went: 0 or 1.
  size_t erase(const T &v) {
    auto it = runs_.upper_bound(v);
    if (it == runs_.begin()) return 0;
    --it;
    Run &r = it->second;
    auto pos = std::lower_bound(r.begin(), r.end(), v);
    if (pos == r.end() || !(*pos == v)) return 0;
    const bool first = pos == r.begin();
    r.erase(pos);
    --size_;
    if (r.empty()) {
      runs_.erase(it);
      return 1;
    }
    if (first) it = Rekey(it);
    MergeAround(it);
    return 1;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() {
    runs_.clear();
    size_ = 0;
  }

  // Calls `visit` on each element in order until it returns false; false
  // if it did.
  template <typename F>
  bool ForEach(F &&visit) const {
    for (const auto &[first, run] : runs_)
      for (const T &v : run)
        if (!visit(v)) return false;
    return true;
  }

 private:
  using Run = std::vector<T>;
  using Runs = std::map<T, Run>;  // by the run's first element

  static Run NewRun(const T &v) {
    Run r;
    r.reserve(kRun);
    r.push_back(v);
    return r;
  }

  // The run `v` belongs in: the last whose first element is not above it,
  // or the first run.
  typename Runs::iterator RunFor(const T &v) {
    auto it = runs_.upper_bound(v);
    return it == runs_.begin() ? it : std::prev(it);
  }

  // After its first element changed.
  typename Runs::iterator Rekey(typename Runs::iterator it) {
    auto node = runs_.extract(it);
    node.key() = node.mapped().front();
    return runs_.insert(std::move(node)).position;
  }

  // Splits a full run in halves; returns the half `v` belongs in.
  typename Runs::iterator Split(typename Runs::iterator it, const T &v) {
    Run &r = it->second;
    Run upper;
    upper.reserve(kRun);
    upper.assign(r.begin() + kRun / 2, r.end());
    r.erase(r.begin() + kRun / 2, r.end());
    const T key = upper.front();
    auto next = runs_.emplace_hint(std::next(it), key, std::move(upper));
    return v < key ? it : next;
  }

  // Merges a thinned run with a neighbour when both fit in half a run.
  void MergeAround(typename Runs::iterator it) {
    if (auto next = std::next(it);
        next != runs_.end() && it->second.size() + next->second.size() <= kRun / 2) {
      it->second.insert(it->second.end(), next->second.begin(), next->second.end());
      runs_.erase(next);
    }
    if (it != runs_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.size() + it->second.size() <= kRun / 2) {
        prev->second.insert(prev->second.end(), it->second.begin(), it->second.end());
        runs_.erase(it);
      }
    }
  }

  Runs runs_;
  size_t size_ = 0;
};

}  // namespace maru
