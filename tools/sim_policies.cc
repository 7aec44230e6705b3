#include "sim_policies.h"

#include <cmath>
#include <functional>
#include <list>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "sim_freq_variant.h"
#include "sim_lhd.h"
#include "sim_run_class.h"

namespace maru::bench {
namespace {

// What a keyed policy knows of a cached block.
struct BlockState {
  uint64_t last = 0;      // last use, a sequence number
  uint64_t hits = 0;      // reads since stored
  uint64_t depth = 0;     // blocks before it in its chain
  uint64_t children = 0;  // cached blocks extending it
  uint64_t parent = 0;
  int rank = 0;  // where it sits in the order: 1 behind every leaf
  double key = 0;
};

// Evicts the block of least key (ties: least recently used). Keys are
// computed when a block is stored or read, from its state and `inflation`
// (GreedyDual's L: the key of the last victim). With `leaves_first`, a
// block something extends goes only when no leaf is left.
class KeyedPolicy : public SimPolicy {
 public:
  using KeyFn = std::function<double(const BlockState &, double inflation)>;
  KeyedPolicy(KeyFn key, bool cascades, bool leaves_first)
      : key_(std::move(key)), cascades_(cascades), leaves_first_(leaves_first) {}

  void Hit(uint64_t b) override {
    Update(b, [&](BlockState &s) {
      s.last = ++clock_;
      ++s.hits;
    });
  }
  void Insert(uint64_t b, uint64_t parent) override {
    BlockState s;
    s.last = ++clock_;
    s.parent = parent;
    if (auto p = state_.find(parent); parent && p != state_.end()) {
      s.depth = p->second.depth + 1;
      Update(
          parent, [](BlockState &ps) { ++ps.children; }, false);
    }
    state_[b] = s;
    order_.insert(Entry(b, state_[b]));
    Update(b, [](BlockState &) {});
  }
  uint64_t Victim() override {
    if (order_.empty()) return 0;
    inflation_ = std::get<1>(*order_.begin());
    return std::get<3>(*order_.begin());
  }
  void Erase(uint64_t b) override {
    auto it = state_.find(b);
    if (it == state_.end()) return;
    order_.erase(Entry(b, it->second));
    const uint64_t parent = it->second.parent;
    state_.erase(it);
    if (auto p = state_.find(parent); parent && p != state_.end())
      Update(
          parent, [](BlockState &ps) { --ps.children; }, false);
  }
  bool Cascades() const override { return cascades_; }

 private:
  using OrderEntry = std::tuple<int, double, uint64_t, uint64_t>;  // (rank, key, last, block)
  OrderEntry Entry(uint64_t b, const BlockState &s) const { return {s.rank, s.key, s.last, b}; }
  // Changes a block's state by `change`, and its place in the order.
  // Its key is computed again only on a use (`used`).
  template <class F>
  void Update(uint64_t b, F change, bool used = true) {
    BlockState &s = state_.at(b);
    order_.erase(Entry(b, s));  // where it was
    change(s);
    s.rank = leaves_first_ && s.children ? 1 : 0;
    if (used) s.key = key_(s, inflation_);
    order_.insert(Entry(b, s));
  }

  KeyFn key_;
  bool cascades_, leaves_first_;
  uint64_t clock_ = 0;
  double inflation_ = 0;
  std::unordered_map<uint64_t, BlockState> state_;
  std::set<OrderEntry> order_;
};

// SIEVE (Zhang et al., NSDI'24): a FIFO with one visited bit per block; a
// hand walks from the oldest toward the newest, clearing bits, and evicts
// the first unvisited block. Survivors keep their place.
class SievePolicy : public SimPolicy {
 public:
  void Hit(uint64_t b) override { where_.at(b)->second = true; }
  void Insert(uint64_t b, uint64_t) override {
    queue_.push_front({b, false});
    where_[b] = queue_.begin();
  }
  uint64_t Victim() override {
    if (queue_.empty()) return 0;
    auto hand = hand_valid_ ? hand_ : std::prev(queue_.end());
    while (hand->second) {
      hand->second = false;
      hand = hand == queue_.begin() ? std::prev(queue_.end()) : std::prev(hand);
    }
    hand_ = hand;
    hand_valid_ = true;
    return hand->first;
  }
  void Erase(uint64_t b) override {
    auto it = where_.at(b);
    if (hand_valid_ && hand_ == it) {
      hand_valid_ = it != queue_.begin();
      if (hand_valid_) hand_ = std::prev(it);
    }
    queue_.erase(it);
    where_.erase(b);
  }
  bool Cascades() const override { return false; }

 private:
  std::list<std::pair<uint64_t, bool>> queue_;  // front: newest
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, bool>>::iterator> where_;
  std::list<std::pair<uint64_t, bool>>::iterator hand_;
  bool hand_valid_ = false;
};

// S3-FIFO (Yang et al., SOSP'23): new blocks enter a small FIFO (10%);
// one read there moves a block to the main FIFO when it reaches the end,
// else it leaves, remembered in a ghost FIFO; a block stored again while
// remembered goes straight to main. Main is a FIFO with a 2-bit frequency
// given a second chance per read.
class S3FifoPolicy : public SimPolicy {
 public:
  explicit S3FifoPolicy(uint64_t capacity)
      : small_cap_(std::max<uint64_t>(1, capacity / 10)), ghost_cap_(capacity) {}
  void Hit(uint64_t b) override {
    Block &s = blocks_.at(b);
    s.freq = std::min(s.freq + 1, 3);
  }
  void Insert(uint64_t b, uint64_t) override {
    const bool remembered = ghost_set_.erase(b) > 0;
    Block s{remembered, 0, {}};
    auto &q = remembered ? main_ : small_;
    q.push_front(b);
    s.at = q.begin();
    blocks_[b] = s;
  }
  uint64_t Victim() override {
    for (;;) {
      if (!small_.empty() && (small_.size() >= small_cap_ || main_.empty())) {
        const uint64_t b = small_.back();
        Block &s = blocks_.at(b);
        if (s.freq == 0) {
          Remember(b);
          return b;
        }
        small_.pop_back();
        main_.push_front(b);
        s = Block{true, 0, main_.begin()};
        continue;
      }
      if (main_.empty()) return 0;
      const uint64_t b = main_.back();
      Block &s = blocks_.at(b);
      if (s.freq == 0) return b;
      --s.freq;
      main_.pop_back();
      main_.push_front(b);
      s.at = main_.begin();
    }
  }
  void Erase(uint64_t b) override {
    auto it = blocks_.find(b);
    if (it == blocks_.end()) return;
    (it->second.in_main ? main_ : small_).erase(it->second.at);
    blocks_.erase(it);
  }
  bool Cascades() const override { return false; }

 private:
  struct Block {
    bool in_main;
    int freq;
    std::list<uint64_t>::iterator at;
  };
  void Remember(uint64_t b) {
    ghost_.push_front(b);
    ghost_set_.insert(b);
    while (ghost_.size() > ghost_cap_) {
      ghost_set_.erase(ghost_.back());
      ghost_.pop_back();
    }
  }
  uint64_t small_cap_, ghost_cap_;
  std::list<uint64_t> small_, main_, ghost_;  // front: newest
  std::unordered_set<uint64_t> ghost_set_;    // may keep a block the ghost FIFO dropped
  std::unordered_map<uint64_t, Block> blocks_;
};

// A 2Q-like segmented LRU: stored blocks are on probation, a read moves
// one to the protected segment (at most 80%), whose least recently used
// falls back to probation. Probation's least recently used goes first.
class SegmentedLruPolicy : public SimPolicy {
 public:
  explicit SegmentedLruPolicy(uint64_t capacity) : protected_cap_(capacity * 8 / 10) {}
  void Hit(uint64_t b) override {
    Block &s = blocks_.at(b);
    (s.is_protected ? protected_ : probation_).erase(s.at);
    protected_.push_front(b);
    s = Block{true, protected_.begin()};
    while (protected_.size() > protected_cap_) {
      const uint64_t d = protected_.back();
      protected_.pop_back();
      probation_.push_front(d);
      blocks_.at(d) = Block{false, probation_.begin()};
    }
  }
  void Insert(uint64_t b, uint64_t) override {
    probation_.push_front(b);
    blocks_[b] = Block{false, probation_.begin()};
  }
  uint64_t Victim() override {
    if (!probation_.empty()) return probation_.back();
    return protected_.empty() ? 0 : protected_.back();
  }
  void Erase(uint64_t b) override {
    auto it = blocks_.find(b);
    if (it == blocks_.end()) return;
    (it->second.is_protected ? protected_ : probation_).erase(it->second.at);
    blocks_.erase(it);
  }
  bool Cascades() const override { return false; }

 private:
  struct Block {
    bool is_protected;
    std::list<uint64_t>::iterator at;
  };
  uint64_t protected_cap_;
  std::list<uint64_t> probation_, protected_;  // front: most recent
  std::unordered_map<uint64_t, Block> blocks_;
};

// Path ghosts: the server names a block by its path (the hash of its
// tokens), so a block stored again after its eviction can be recognised
// by a ghost keyed by that name, bounded to as many entries as the cache
// holds (oldest forgotten first). A ghost remembers how often the block
// had been read (the turns of its conversation that used it).
class PathGhosts {
 public:
  explicit PathGhosts(uint64_t capacity) : cap_(std::max<uint64_t>(1, capacity)) {}
  void Remember(uint64_t b, uint64_t reads) {
    Forget(b);
    fifo_.push_front(b);
    at_[b] = {reads, fifo_.begin()};
    while (fifo_.size() > cap_) {
      at_.erase(fifo_.back());
      fifo_.pop_back();
    }
  }
  // The reads of a remembered block, forgetting it; -1 when not remembered.
  int64_t Take(uint64_t b) {
    auto it = at_.find(b);
    if (it == at_.end()) return -1;
    const int64_t reads = static_cast<int64_t>(it->second.first);
    Forget(b);
    return reads;
  }

 private:
  void Forget(uint64_t b) {
    auto it = at_.find(b);
    if (it == at_.end()) return;
    fifo_.erase(it->second.second);
    at_.erase(it);
  }
  uint64_t cap_;
  std::list<uint64_t> fifo_;  // front: newest
  std::unordered_map<uint64_t, std::pair<uint64_t, std::list<uint64_t>::iterator>> at_;
};

// The frequency policy (last use + weight x capacity x log2(1 + reads) -
// 2 x depth) with path ghosts, in three variants:
// - kCarry: a block stored again while its ghost is remembered comes back
//   with the reads it had, plus one (its store is a reuse missed).
// - kAdapt: also, ARC/LeCaR-like, the weight moves toward the class whose
//   evictions were the mistakes: the ghost-hit rate (returns per eviction,
//   decayed) of blocks evicted never read against that of blocks evicted
//   after reads; more returns of read blocks raise the weight.
// - kProbation: also a block stored for the first time (no ghost) enters
//   `probation` x capacity ticks behind (S3-FIFO's small queue as an
//   offset); a read or a ghost return lifts it. The offset adapts: a
//   return of a block evicted on probation shrinks it, a return of one
//   evicted off probation grows it (by 0.3 of the step).
// Inheriting (the chain-* candidates): a new block starts with the reads
// of the block it extends (the turns its conversation has had).
// - kHazard: the bonus is learned instead of log2(1 + reads): per count of
//   reads k (0..7, carried through ghosts), the decayed share of blocks
//   with k reads that got a (k+1)th; bonus = weight x capacity x
//   log2(p_k / p_0).
class GhostFrequencyPolicy : public SimPolicy {
 public:
  enum Mode { kCarry, kAdapt, kProbation, kHazard };
  GhostFrequencyPolicy(uint64_t capacity, Mode mode, double weight, double probation,
                       bool inherit = false)
      : inherit_(inherit),
        cap_(static_cast<double>(capacity)),
        mode_(mode),
        weight_(weight),
        probation_(probation),
        ghosts_(capacity) {
    for (auto &c : seen_) c = 1;
    for (auto &c : cont_) c = 0.3;
  }
  void Hit(uint64_t b) override {
    BlockState &s = state_.at(b);
    Count(s.hits, true);
    ++s.hits;
    s.children = 0;  // off probation (`children` is the probation flag here)
    Use(b, s);
  }
  void Insert(uint64_t b, uint64_t parent) override {
    BlockState s;
    s.parent = parent;
    uint64_t inherited = 0;
    if (auto p = state_.find(parent); parent && p != state_.end()) {
      s.depth = p->second.depth + 1;
      if (inherit_) inherited = p->second.hits;
    }
    const int64_t ghost = ghosts_.Take(b);
    if (ghost >= 0) {
      Learn(static_cast<uint64_t>(ghost), ghost_probation_.erase(b) > 0);
      Count(static_cast<uint64_t>(ghost), true);
      s.hits = static_cast<uint64_t>(ghost) + 1;
    } else if (mode_ == kProbation) {
      s.children = 1;  // on probation
    }
    s.hits = std::max(s.hits, inherited);
    Count(s.hits, false);
    state_[b] = s;
    Use(b, state_[b]);
  }
  uint64_t Victim() override { return order_.empty() ? 0 : order_.begin()->second; }
  void Erase(uint64_t b) override {
    auto it = state_.find(b);
    if (it == state_.end()) return;
    order_.erase({it->second.key, b});
    ghosts_.Remember(b, it->second.hits);
    const bool probation = it->second.children == 1;
    if (probation) ghost_probation_.insert(b);
    evicted_[it->second.hits ? 1 : 0] = evicted_[it->second.hits ? 1 : 0] * kDecay + 1;
    state_.erase(it);
  }
  bool Cascades() const override { return false; }
  void set_weight(double w) { weight_ = w; }

 private:
  static constexpr double kDecay = 0.99999;
  static constexpr int kClasses = 8;
  // Seen with k reads (`continued`: and then read once more).
  void Count(uint64_t k, bool continued) {
    if (mode_ != kHazard) return;
    const size_t i = std::min<uint64_t>(k, kClasses - 1);
    (continued ? cont_ : seen_)[i] += 1;
  }
  double Bonus(uint64_t hits) const {
    if (mode_ == kHazard) {
      const size_t i = std::min<uint64_t>(hits, kClasses - 1);
      const double p = cont_[i] / seen_[i], p0 = cont_[0] / seen_[0];
      return weight_ * cap_ * std::log2(std::max(p, 1e-3) / std::max(p0, 1e-3));
    }
    return weight_ * cap_ * std::log2(1.0 + static_cast<double>(hits));
  }
  void Use(uint64_t b, BlockState &s) {
    order_.erase({s.key, b});
    s.key = static_cast<double>(++clock_) + Bonus(s.hits) - 2.0 * static_cast<double>(s.depth) -
            (s.children == 1 ? probation_ * cap_ : 0);
    order_.insert({s.key, b});
  }
  // A block evicted with `reads` came back.
  void Learn(uint64_t reads, bool was_probation) {
    returned_[reads ? 1 : 0] = returned_[reads ? 1 : 0] * kDecay + 1;
    if (mode_ == kAdapt) {
      const double r0 = returned_[0] / evicted_[0], r1 = returned_[1] / evicted_[1];
      weight_ = std::clamp(weight_ + kStep * (r1 - r0) / (r1 + r0 + 1e-9), 0.0, 2.0);
    }
    // A return of a block evicted on probation: the offset was too long.
    if (mode_ == kProbation)
      probation_ = std::clamp(probation_ + kStep * (was_probation ? -1 : 0.3), 0.0, 1.0);
  }
  static constexpr double kStep = 0.001;

  bool inherit_;
  double cap_;
  Mode mode_;
  double weight_, probation_;
  PathGhosts ghosts_;
  std::unordered_set<uint64_t> ghost_probation_;
  double evicted_[2] = {1, 1}, returned_[2] = {0, 0};
  double seen_[kClasses], cont_[kClasses];
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, BlockState> state_;
  std::set<std::pair<double, uint64_t>> order_;
};

// `ghost-freq` whose weight is chosen online by miniature simulations
// (Waldspurger et al., "Cache Modeling and Optimization using Miniature
// Simulations", ATC'17): the blocks whose path hash falls in one of
// `sample` buckets also run through shadow caches of capacity / sample
// blocks (metadata only), one per candidate weight, each counting its hits
// with a decay; every kEvery uses the main policy takes the weight of the
// shadow that hit most. A shadow sees a use as a read when it holds the
// block and as a store otherwise (it does not model the prefix rule).
class MiniSimFrequencyPolicy : public SimPolicy {
 public:
  MiniSimFrequencyPolicy(uint64_t capacity, uint64_t sample)
      : sample_(sample), main_(capacity, GhostFrequencyPolicy::kCarry, 0.25, 0) {
    const uint64_t small = std::max<uint64_t>(16, capacity / sample_);
    for (double w : kWeights)
      shadows_.push_back(
          {std::make_unique<GhostFrequencyPolicy>(small, GhostFrequencyPolicy::kCarry, w, 0),
           {},
           small,
           0});
  }
  void Hit(uint64_t b) override {
    main_.Hit(b);
    Shadow(b);
  }
  void Insert(uint64_t b, uint64_t parent) override {
    main_.Insert(b, parent);
    Shadow(b);
  }
  uint64_t Victim() override { return main_.Victim(); }
  void Erase(uint64_t b) override { main_.Erase(b); }
  bool Cascades() const override { return false; }

 private:
  static constexpr uint64_t kEvery = 1000;
  static constexpr double kDecay = 0.9998;
  static constexpr double kWeights[] = {0, 0.25, 0.5, 1, 2};
  struct ShadowCache {
    std::unique_ptr<GhostFrequencyPolicy> policy;
    std::unordered_set<uint64_t> held;
    uint64_t capacity;
    double score;
  };
  static uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  void Shadow(uint64_t b) {
    if (Mix(b) % sample_ == 0)
      for (ShadowCache &s : shadows_) {
        s.score *= kDecay;
        if (s.held.count(b)) {
          s.policy->Hit(b);
          s.score += 1;
          continue;
        }
        if (s.held.size() >= s.capacity) {
          const uint64_t victim = s.policy->Victim();
          s.policy->Erase(victim);
          s.held.erase(victim);
        }
        s.held.insert(b);
        s.policy->Insert(b, 0);
      }
    if (++uses_ % kEvery) return;
    size_t best = 1;  // 0.25, `frequency`'s, on a tie
    for (size_t i = 0; i < shadows_.size(); ++i)
      if (shadows_[i].score > shadows_[best].score) best = i;
    main_.set_weight(kWeights[best]);
  }

  uint64_t sample_;
  GhostFrequencyPolicy main_;
  std::vector<ShadowCache> shadows_;
  uint64_t uses_ = 0;
};

// Not a policy a server can run: it knows, from the whole trace, how often
// each block will be referenced, so whether a block will be referenced
// again (not when). It evicts blocks with no reference left first, least
// recently used first, then the others by LRU: the ceiling of any policy
// that predicts reuse perfectly but not its time. With error rates > 0 a
// prediction is wrong with that probability (a deterministic hash of the
// block and its use), to see how good a predictor must be.
class ReuseOraclePolicy : public SimPolicy {
 public:
  ReuseOraclePolicy(const std::vector<TraceRequest> &trace, double false_positive,
                    double false_negative)
      : false_positive_(false_positive), false_negative_(false_negative) {
    for (const TraceRequest &r : trace)
      for (uint64_t b : r.blocks) ++left_[b + 1];
  }
  void Hit(uint64_t b) override { Use(b); }
  void Insert(uint64_t b, uint64_t) override { Use(b); }
  uint64_t Victim() override { return order_.empty() ? 0 : std::get<2>(*order_.begin()); }
  void Erase(uint64_t b) override {
    auto it = at_.find(b);
    if (it == at_.end()) return;
    order_.erase(it->second);
    at_.erase(it);
  }
  bool Cascades() const override { return false; }

 private:
  // A reference the simulator did not pass on (a block after the first
  // miss that is still cached) is not counted: such a block looks
  // referenced again until its next call, which errs toward keeping it.
  void Use(uint64_t b) {
    Erase(b);
    uint64_t &left = left_[b];
    if (left) --left;
    ++clock_;
    bool reused = left > 0;
    const double error = reused ? false_negative_ : false_positive_;
    if (error > 0 &&
        static_cast<double>(Mix(b * 0x9e3779b97f4a7c15ULL + clock_) % 1000000) < error * 1e6)
      reused = !reused;
    const std::tuple<int, uint64_t, uint64_t> e{reused ? 1 : 0, clock_, b};
    order_.insert(e);
    at_[b] = e;
  }
  static uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  double false_positive_, false_negative_;
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, uint64_t> left_;          // references still to come
  std::set<std::tuple<int, uint64_t, uint64_t>> order_;  // (reused later, last use, block)
  std::unordered_map<uint64_t, std::tuple<int, uint64_t, uint64_t>> at_;
};

// Recompute cost of a block at `depth` relative to the first block: its
// 512 tokens' weights plus attention over everything before them
// (RecomputeCost of Llama-3.1-8B).
double DepthCost(uint64_t depth) {
  static const RecomputeCost cost = Llama8BCost();
  static const double first = cost.Tokens(0, 512);
  return cost.Tokens(depth * 512, 512) / first;
}

struct Candidate {
  const char *name;
  std::function<std::unique_ptr<SimPolicy>(uint64_t capacity)> make;
};

const std::vector<Candidate> &Candidates() {
  using GF = GhostFrequencyPolicy;
  auto ghost = [](GF::Mode m, double w, double p, bool inherit = false) {
    return [=](uint64_t c) { return std::make_unique<GF>(c, m, w, p, inherit); };
  };
  static const std::vector<Candidate> all = {
      {"sieve", [](uint64_t) { return std::make_unique<SievePolicy>(); }},
      {"s3fifo", [](uint64_t c) { return std::make_unique<S3FifoPolicy>(c); }},
      {"slru", [](uint64_t c) { return std::make_unique<SegmentedLruPolicy>(c); }},
      // LFU with dynamic aging: reads + 1, plus L.
      {"lfuda",
       [](uint64_t) {
         return std::make_unique<KeyedPolicy>(
             [](const BlockState &s, double l) { return l + static_cast<double>(s.hits + 1); },
             false, false);
       }},
      // GreedyDual-Size-Frequency: L + frequency x recompute cost / size.
      {"gdsf",
       [](uint64_t) {
         return std::make_unique<KeyedPolicy>(
             [](const BlockState &s, double l) {
               return l + static_cast<double>(s.hits + 1) * DepthCost(s.depth);
             },
             false, false);
       }},
      // The same over the prefix tree: leaves first, so a prefix is never
      // evicted from under the chains that extend it.
      {"tree-gdsf",
       [](uint64_t) {
         return std::make_unique<KeyedPolicy>(
             [](const BlockState &s, double l) {
               return l + static_cast<double>(s.hits + 1) * DepthCost(s.depth);
             },
             false, true);
       }},
      // LRU over the prefix tree, leaves first, a block's age discounted by
      // its recompute cost (deep blocks stay longer).
      {"tree-cost-lru",
       [](uint64_t c) {
         return std::make_unique<KeyedPolicy>(
             [c](const BlockState &s, double) {
               return static_cast<double>(s.last) +
                      static_cast<double>(c) * (DepthCost(s.depth) - 1);
             },
             false, true);
       }},
      // LRU where a block read before stays a capacity's worth of uses longer.
      {"freq-lru",
       [](uint64_t c) {
         return std::make_unique<KeyedPolicy>(
             [c](const BlockState &s, double) {
               return static_cast<double>(s.last) +
                      static_cast<double>(c) * static_cast<double>(std::min<uint64_t>(s.hits, 2));
             },
             false, false);
       }},
      // Path ghosts, probation, hazard (GhostFrequencyPolicy).
      {"minisim", [](uint64_t c) { return std::make_unique<MiniSimFrequencyPolicy>(c, 16); }},
      {"minisim-4", [](uint64_t c) { return std::make_unique<MiniSimFrequencyPolicy>(c, 4); }},
      {"ghost-freq", ghost(GF::kCarry, 0.25, 0)},
      {"ghost-freq-0.5", ghost(GF::kCarry, 0.5, 0)},
      {"ghost-freq-1", ghost(GF::kCarry, 1, 0)},
      {"ghost-freq-2", ghost(GF::kCarry, 2, 0)},
      {"ghost-adapt", ghost(GF::kAdapt, 0.25, 0)},
      {"ghost-adapt-1", ghost(GF::kAdapt, 1, 0)},
      {"ghost-probation", ghost(GF::kProbation, 0.25, 0.25)},
      {"ghost-probation-0.5", ghost(GF::kProbation, 0.5, 0.25)},
      {"ghost-probation-1", ghost(GF::kProbation, 1, 0.25)},
      {"hazard", ghost(GF::kHazard, 0.25, 0)},
      {"chain-freq", ghost(GF::kCarry, 0.25, 0, true)},
      {"chain-hazard", ghost(GF::kHazard, 0.25, 0, true)},
      {"hazard-0.5", ghost(GF::kHazard, 0.5, 0)},
      {"hazard-0.125", ghost(GF::kHazard, 0.125, 0)},
      // Third round: a reuse probability learned per class of how a block
      // was stored (sim_run_class.h).
      {"run-class", [](uint64_t c) { return MakeRunClassPolicy(c, 0.25, -3); }},
      {"run-class-0.5", [](uint64_t c) { return MakeRunClassPolicy(c, 0.5, -3); }},
      {"run-class-up-1", [](uint64_t c) { return MakeRunClassPolicy(c, 1, 0); }},
      {"run-class-half", [](uint64_t c) { return MakeRunClassPolicy(c, 0.5, -0.5); }},
      // Least hit density, learned per class and age, 64 (256) samples.
      {"lhd", [](uint64_t c) { return MakeLhdPolicy(c, 64, false); }},
      {"lhd-256", [](uint64_t c) { return MakeLhdPolicy(c, 256, false); }},
      {"lhd-tree", [](uint64_t c) { return MakeLhdPolicy(c, 64, true); }},
  };
  return all;
}

}  // namespace

std::unique_ptr<SimPolicy> MakeReuseOracle(const std::vector<TraceRequest> &trace,
                                           double false_positive, double false_negative) {
  return std::make_unique<ReuseOraclePolicy>(trace, false_positive, false_negative);
}

std::vector<std::string> CandidatePolicyNames() {
  std::vector<std::string> names;
  for (const Candidate &c : Candidates()) names.push_back(c.name);
  return names;
}

Result<std::unique_ptr<SimPolicy>> MakeCandidatePolicy(const std::string &name, const ChunkChains &,
                                                       uint64_t capacity) {
  for (const Candidate &c : Candidates())
    if (name == c.name) return c.make(capacity);
  if (FrequencyVariantParams p; ParseFrequencyVariant(name, &p)) return MakeFrequencyVariant(p);
  std::string known;
  for (const std::string &n : SimPolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::Error(EINVAL, "unknown policy '" + name + "' (" + known + ")");
}

}  // namespace maru::bench
