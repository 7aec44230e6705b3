// Eviction order, checked against a reference that recomputes it from
// scratch, on random workloads: chunks created (with a parent chunk or
// none), sealed, re-sealed, read, re-parented and removed, with the
// ChunkChains and policy told as the Evictor tells them.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "meta/chunk_chains.h"
#include "meta/eviction_frequency.h"
#include "meta/eviction_policy.h"

namespace maru {
namespace {

// The order from its definition: every sealed chunk has a last use (seal,
// re-seal, read, new parent). LRU: least recently used first. Prefix: the
// tails (sealed chunks no sealed chunk names as parent) by last use, then
// every sealed chunk by last use. Frequency: by the key each chunk got at
// its last use (FrequencyEviction::Key of that use's tick, the reads, depth
// and hint then, the sealed chunks then, and the weight its evidence gave
// then), moved by each hint since by the difference of the hints' offsets
// (at the sealed chunks then), least first; a read clears a drop hint, a
// first seal or new parent any hint; a drop is refused by a chunk that more
// than kDropFanout chunks extend, or another one not sealed, or another one
// read and not dropped. The evidence: a read counts for the
// chunk's class (read before or not) with its age, a chunk that goes
// (removed, or re-parented) counts as gone in its class.
class Reference {
 public:
  struct Frequency {
    int64_t key = 0;
    uint32_t reads = 0, depth = 0;
    uint64_t last = 0;
    RetentionHint hint = RetentionHint::kNone;
  };
  std::map<uint64_t, uint64_t> parent;    // every chunk not removed (0: none)
  std::map<uint64_t, uint64_t> last_use;  // the sealed ones
  std::map<uint64_t, Frequency> frequency;
  FrequencyEviction::Evidence evidence;
  uint64_t clock = 0;

  // A use of sealed `ino` at `clock`: a read, a seal again, or (`fresh`)
  // the first seal or a new parent, which starts its reads over.
  void Used(uint64_t ino, bool fresh) {
    Frequency &f = frequency[ino];
    if (fresh) {
      auto p = frequency.find(parent[ino]);
      const uint32_t depth = p == frequency.end() || p->first == ino
                                 ? 0
                                 : std::min(p->second.depth + 1, FrequencyEviction::kMaxDepth);
      f = Frequency{0, 0, depth};
    } else {
      evidence.Reread(f.reads, clock - f.last, last_use.size());
      ++f.reads;
      if (f.hint == RetentionHint::kDrop) f.hint = RetentionHint::kNone;
    }
    f.last = clock;
    f.key =
        FrequencyEviction::Key(clock, f.reads, f.depth, f.hint, last_use.size(), evidence.Weight());
  }
  // A client's hint on sealed `ino`: not a use.
  void Hinted(uint64_t ino, RetentionHint hint) {
    if (hint == RetentionHint::kDrop && ExtendedByLiveChain(ino)) return;
    Frequency &f = frequency.at(ino);
    f.key += FrequencyEviction::HintOffset(hint, last_use.size()) -
             FrequencyEviction::HintOffset(f.hint, last_use.size());
    f.hint = hint;
  }
  bool ExtendedByLiveChain(uint64_t ino) const {
    size_t extensions = 0;
    bool live = false;
    for (const auto &[chunk, p] : parent) {
      if (p != ino || chunk == ino) continue;
      ++extensions;
      auto f = frequency.find(chunk);
      live |=
          f == frequency.end() || (f->second.reads > 0 && f->second.hint != RetentionHint::kDrop);
    }
    return live || extensions > FrequencyEviction::kDropFanout;
  }
  // Sealed `ino` goes (the policy forgets it): evidence of its class.
  void Gone(uint64_t ino) {
    const uint32_t reads = frequency.at(ino).reads;
    frequency.erase(ino);
    last_use.erase(ino);
    evidence.Gone(reads, last_use.size());
  }

  std::vector<uint64_t> Order(const std::string &policy) const {
    if (policy == "frequency") {
      std::vector<std::pair<int64_t, uint64_t>> by_key;
      for (const auto &[ino, f] : frequency) by_key.emplace_back(f.key, ino);
      std::sort(by_key.begin(), by_key.end());
      std::vector<uint64_t> order;
      for (const auto &[key, ino] : by_key) order.push_back(ino);
      return order;
    }
    const bool prefix = policy == "prefix";
    std::vector<std::pair<uint64_t, uint64_t>> by_use;
    for (const auto &[ino, use] : last_use) by_use.emplace_back(use, ino);
    std::sort(by_use.begin(), by_use.end());
    std::set<uint64_t> extended;  // named as parent by a sealed chunk
    for (const auto &[ino, p] : parent)
      if (last_use.count(ino)) extended.insert(p);
    std::vector<uint64_t> order;
    if (prefix)
      for (const auto &[use, ino] : by_use)
        if (!extended.count(ino)) order.push_back(ino);
    for (const auto &[use, ino] : by_use) order.push_back(ino);
    return order;
  }
};

// Drives chains and policy as the Evictor does, and the reference alike.
class Workload {
 public:
  Workload(const std::string &policy, uint32_t seed) : policy_name_(policy), rng_(seed) {
    policy_ = std::move(*MakeEvictionPolicy(policy, chains_));
  }

  void Step() {
    if (policy_name_ == "frequency" && !ref_.last_use.empty() && Pick(6) == 0) return Hint();
    const int op = Pick(10);
    if (ref_.parent.empty() || op < 3) return Create();
    const uint64_t ino = Any();
    const bool sealed = ref_.last_use.count(ino);
    if (op < 6) return Seal(ino);
    if (op < 8 && sealed) {
      // Half the reads go to a chunk read before, if the seed says so:
      // some workloads teach frequency that reads predict rereads.
      if (rereads_ && !read_.empty() && Pick(2) == 0) {
        const uint64_t again = read_[Pick(read_.size())];
        if (ref_.last_use.count(again)) return Read(again);
      }
      read_.push_back(ino);
      return Read(ino);
    }
    if (op < 9) return SetParent(ino, Pick(4) == 0 ? 0 : Pick(20) == 0 ? ino : Any());
    Remove(ino);
  }

  // What the policy walks, and what the reference says it should.
  std::vector<uint64_t> Walked() const {
    std::vector<uint64_t> walked;
    policy_->InOrder([&](uint64_t ino) {
      walked.push_back(ino);
      return true;
    });
    return walked;
  }
  std::vector<uint64_t> Expected() const { return ref_.Order(policy_name_); }

  // Some sealed chunks held (leased, pinned...): not evictable.
  std::set<uint64_t> Held() {
    std::set<uint64_t> held;
    for (const auto &[ino, use] : ref_.last_use)
      if (Pick(3) == 0) held.insert(ino);
    return held;
  }

  // Evicts `victim` as Evictor::EvictChunk does: with, under the prefix
  // policy, the chunks extending it that are not held.
  void Evict(uint64_t victim, const std::set<uint64_t> &held) {
    std::vector<uint64_t> descendants;
    if (policy_->EvictsDescendants())
      chains_.ForEachDescendant(victim, [&](uint64_t ino) {
        if (ref_.last_use.count(ino) && !held.count(ino)) descendants.push_back(ino);
      });
    Remove(victim);
    for (uint64_t ino : descendants)
      if (ref_.last_use.count(ino)) Remove(ino);
  }

  EvictionPolicy &policy() { return *policy_; }
  // The weight the reference's evidence gives frequency's bonus now.
  double weight() const { return ref_.evidence.Weight(); }
  size_t sealed() const { return ref_.last_use.size(); }

 private:
  uint64_t Pick(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
  uint64_t Any() {
    auto it = ref_.parent.begin();
    std::advance(it, Pick(ref_.parent.size()));
    return it->first;
  }

  void Create() {
    const uint64_t ino = next_ino_++;
    const uint64_t parent = ref_.parent.empty() || Pick(4) == 0 ? 0 : Any();
    chains_.SetParent(ino, parent);
    ref_.parent[ino] = parent;
  }
  void Seal(uint64_t ino) {
    policy_->OnInsert(ino);
    const bool fresh = !ref_.last_use.count(ino);
    ref_.last_use[ino] = ++ref_.clock;
    ref_.Used(ino, fresh);
  }
  // A hint on a sealed chunk, as the Evictor passes it on.
  void Hint() {
    auto it = ref_.last_use.begin();
    std::advance(it, Pick(ref_.last_use.size()));
    const auto hint = static_cast<RetentionHint>(Pick(kRetentionHintMax + 1));
    policy_->OnHint(it->first, hint);
    ref_.Hinted(it->first, hint);
  }
  void Read(uint64_t ino) {
    policy_->OnAccess(ino);
    ref_.last_use[ino] = ++ref_.clock;
    ref_.Used(ino, false);
  }
  void SetParent(uint64_t ino, uint64_t parent) {
    if (ref_.parent[ino] == parent) return;
    const bool sealed = ref_.last_use.count(ino);
    if (sealed) policy_->OnRemove(ino);
    chains_.SetParent(ino, parent);
    if (sealed) policy_->OnInsert(ino);
    ref_.parent[ino] = parent;
    if (!sealed) return;
    ref_.Gone(ino);  // known again only once re-inserted
    ref_.last_use[ino] = ++ref_.clock;
    ref_.Used(ino, true);
  }
  void Remove(uint64_t ino) {
    if (ref_.last_use.count(ino)) {
      policy_->OnRemove(ino);
      if (ref_.frequency.count(ino)) ref_.Gone(ino);
    }
    chains_.Remove(ino);
    ref_.parent.erase(ino);
    ref_.last_use.erase(ino);
  }

  const std::string policy_name_;
  std::mt19937_64 rng_;
  const bool rereads_ = rng_() % 2 == 0;
  std::vector<uint64_t> read_;  // chunks read, in order (some gone since)
  ChunkChains chains_;
  std::unique_ptr<EvictionPolicy> policy_;
  Reference ref_;
  uint64_t next_ino_ = 2;
};

// Victims as the engine chose them before walks: Victim again and again,
// leaving out those chosen.
std::vector<uint64_t> RepeatedVictims(EvictionPolicy &policy, const std::set<uint64_t> &held,
                                      size_t want) {
  std::vector<uint64_t> chosen;
  while (chosen.size() < want) {
    uint64_t v = policy.Victim([&](uint64_t ino) {
      return !held.count(ino) && std::find(chosen.begin(), chosen.end(), ino) == chosen.end();
    });
    if (!v) break;
    chosen.push_back(v);
  }
  return chosen;
}

// Victims in one walk, as Evictor::ChooseVictims takes them.
std::vector<uint64_t> WalkedVictims(EvictionPolicy &policy, const std::set<uint64_t> &held,
                                    size_t want) {
  std::vector<uint64_t> chosen;
  std::set<uint64_t> seen;
  if (want > 0)
    policy.InOrder([&](uint64_t ino) {
      if (held.count(ino) || !seen.insert(ino).second) return true;
      chosen.push_back(ino);
      return chosen.size() < want;
    });
  return chosen;
}

// Victims evicted one after the other, as Evictor::EvictBytes takes them;
// `park` parks the chunks each search passes.
std::vector<uint64_t> EvictInTurn(Workload &w, const std::set<uint64_t> &held, size_t count,
                                  bool park) {
  std::vector<uint64_t> victims;
  while (victims.size() < count) {
    std::vector<uint64_t> passed;
    uint64_t v = w.policy().Victim([&](uint64_t ino) {
      if (!held.count(ino)) return true;
      passed.push_back(ino);
      return false;
    });
    if (park)
      for (uint64_t ino : passed) w.policy().Park(ino);
    if (!v) break;
    victims.push_back(v);
    w.Evict(v, held);
  }
  if (park) w.policy().UnparkAll();
  return victims;
}

// Some sealed chunks held (leased, pinned...): not evictable.
std::set<uint64_t> Held(const std::vector<uint64_t> &walked, std::mt19937_64 *rng) {
  std::set<uint64_t> held;
  for (uint64_t ino : walked)
    if ((*rng)() % 2 == 0) held.insert(ino);
  return held;
}

class EvictionOrderTest : public testing::TestWithParam<std::string> {};

TEST_P(EvictionOrderTest, MatchesTheReferenceOnRandomWorkloads) {
  std::set<double> weights;  // frequency's, as its evidence gave them
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    Workload w(GetParam(), seed);
    for (int step = 1; step <= 3000; ++step) {
      w.Step();
      weights.insert(w.weight());
      if (step % 50) continue;
      ASSERT_EQ(w.Walked(), w.Expected()) << "seed " << seed << " step " << step;
    }
  }
  // The orders checked had no read bonus, a full one and some between.
  if (GetParam() == "frequency") {
    EXPECT_TRUE(weights.count(0.0));
    EXPECT_TRUE(weights.count(FrequencyEviction::kWeight));
    EXPECT_GT(weights.size(), 2u);
  }
}

TEST_P(EvictionOrderTest, OneWalkChoosesWhatRepeatedVictimCallsChose) {
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    Workload w(GetParam(), seed);
    for (int step = 1; step <= 2000; ++step) {
      w.Step();
      if (step % 100) continue;
      const std::set<uint64_t> held = w.Held();
      for (size_t want : {size_t{0}, size_t{1}, w.sealed() / 2, w.sealed() + 1})
        ASSERT_EQ(WalkedVictims(w.policy(), held, want), RepeatedVictims(w.policy(), held, want))
            << "seed " << seed << " step " << step << " want " << want;
    }
  }
}

TEST_P(EvictionOrderTest, ParkingPassedChunksKeepsTheOrderOfEvictions) {
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    Workload parked(GetParam(), seed), plain(GetParam(), seed);
    std::mt19937_64 rng(seed);
    for (int step = 1; step <= 3000; ++step) {
      parked.Step();
      plain.Step();
      if (step % 100) continue;
      const std::set<uint64_t> held = Held(plain.Walked(), &rng);
      const size_t count = rng() % 40;
      ASSERT_EQ(EvictInTurn(parked, held, count, true), EvictInTurn(plain, held, count, false))
          << "seed " << seed << " step " << step;
      ASSERT_EQ(parked.Walked(), parked.Expected()) << "seed " << seed << " step " << step;
      ASSERT_EQ(parked.Walked(), plain.Walked());
    }
  }
}

// As the Evictor parks them: a chunk that may not go (leased, pinned) is
// parked when a walk meets it and stays out of every walk until it may go
// again (Unpark), while chunks keep being used, re-sealed, re-parented and
// removed. Walks then offer what the reference orders, less the held.
TEST_P(EvictionOrderTest, ChunksParkedWhileHeldComeBackToTheirPlace) {
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    Workload w(GetParam(), seed);
    std::mt19937_64 rng(seed);
    std::set<uint64_t> held;
    auto without_held = [&](const std::vector<uint64_t> &order) {
      std::vector<uint64_t> out;
      for (uint64_t ino : order)
        if (!held.count(ino)) out.push_back(ino);
      return out;
    };
    for (int step = 1; step <= 3000; ++step) {
      w.Step();
      if (step % 25) continue;
      for (auto it = held.begin(); it != held.end();) {
        if (rng() % 3) {
          ++it;
          continue;
        }
        w.policy().Unpark(*it);
        it = held.erase(it);
      }
      for (uint64_t ino : w.Expected())
        if (rng() % 8 == 0) held.insert(ino);
      std::vector<uint64_t> walked, passed;
      w.policy().InOrder([&](uint64_t ino) {
        (held.count(ino) ? passed : walked).push_back(ino);
        return true;
      });
      for (uint64_t ino : passed) w.policy().Park(ino);
      ASSERT_EQ(walked, without_held(w.Expected())) << "seed " << seed << " step " << step;
      // Parked, they are not walked past again.
      std::vector<uint64_t> again = w.Walked();
      for (uint64_t ino : passed)
        ASSERT_EQ(std::count(again.begin(), again.end(), ino), 0) << "seed " << seed;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, EvictionOrderTest,
                         testing::Values("lru", "prefix", "frequency"));

// The evidence the frequency policy learns its weight from.
TEST(FrequencyEvidenceTest, TheWeightFollowsWhetherReadChunksAreReadAgain) {
  using F = FrequencyEviction;
  F::Evidence e;
  EXPECT_EQ(e.Weight(), 0);  // nothing known: LRU's order
  for (int i = 0; i < 40; ++i) e.Gone(0, 1000);
  for (int i = 0; i < 40; ++i) e.Reread(0, 1000, 1000);  // unread chunks: 41 / 82
  EXPECT_EQ(e.Weight(), 0);                              // 40 gone: not enough yet
  for (int i = 0; i < 72; ++i) e.Reread(1, 1000, 1000);
  for (int i = 0; i < 24; ++i) e.Gone(1, 1000);  // read chunks: 73 / 98, 1.49 x
  EXPECT_EQ(e.Weight(), F::kWeight);
  // A read soon after the use it follows (under held / 8 ticks) says nothing.
  e.Reread(0, 124, 1000);
  EXPECT_EQ(e.reread[0], 40u);
  e.Reread(0, 125, 1000);
  EXPECT_EQ(e.reread[0], 41u);
  // Read chunks 1.1 x as likely to be read again: half the weight.
  F::Evidence half;
  half.reread[0] = 499, half.gone[0] = 499;  // 0.5
  half.reread[1] = 549, half.gone[1] = 449;  // 0.55
  EXPECT_NEAR(half.Weight(), F::kWeight / 2, 1e-9);
  // Read chunks less likely to be read again than unread ones: none.
  F::Evidence against;
  against.reread[0] = 700, against.gone[0] = 300;
  against.reread[1] = 300, against.gone[1] = 700;
  EXPECT_EQ(against.Weight(), 0);
  // Counts are halved at twice the chunks held: they follow the workload.
  F::Evidence decayed;
  for (int i = 0; i < 199; ++i) decayed.Gone(1, 100);
  EXPECT_EQ(decayed.gone[1], 199u);
  decayed.Gone(1, 100);
  EXPECT_EQ(decayed.gone[1], 100u);
}

// The frequency policy on small cases worked out by hand.
class FrequencyOrderTest : public testing::Test {
 protected:
  std::vector<uint64_t> Order() const {
    std::vector<uint64_t> order;
    policy_->InOrder([&](uint64_t ino) {
      order.push_back(ino);
      return true;
    });
    return order;
  }
  void Seal(uint64_t ino, uint64_t parent = 0) {
    chains_.SetParent(ino, parent);
    policy_->OnInsert(ino);
  }
  const FrequencyEviction::Evidence &evidence() const {
    return dynamic_cast<const FrequencyEviction &>(*policy_).evidence();
  }
  // A workload whose chunks (1000 and up, all gone after) tell the policy
  // that chunks read before are (`reads_predict`) or are not likelier to be
  // read again than chunks just stored.
  void Teach(bool reads_predict) {
    const uint64_t n = 200;
    for (uint64_t i = 0; i < 2 * n; ++i) Seal(1000 + i);
    for (uint64_t i = 0; i < n; ++i) policy_->OnAccess(1000 + i);  // unread ones read
    if (reads_predict) {
      for (uint64_t i = 0; i < n; ++i) policy_->OnAccess(1000 + i);  // and read again
    }
    for (uint64_t i = 0; i < 2 * n; ++i) policy_->OnRemove(1000 + i);
    ASSERT_GE(evidence().gone[0] + evidence().gone[1], FrequencyEviction::kEvidence);
    ASSERT_EQ(evidence().Weight(), reads_predict ? FrequencyEviction::kWeight : 0.0);
    ASSERT_TRUE(Order().empty());
  }
  ChunkChains chains_;
  std::unique_ptr<EvictionPolicy> policy_ = std::move(*MakeEvictionPolicy("frequency", chains_));
};

TEST_F(FrequencyOrderTest, WithoutEvidenceItIsLruOrder) {
  for (uint64_t ino = 1; ino <= 8; ++ino) Seal(ino);
  policy_->OnAccess(1);
  Seal(9);
  Seal(10);
  EXPECT_EQ(Order(), (std::vector<uint64_t>{2, 3, 4, 5, 6, 7, 8, 1, 9, 10}));
}

TEST_F(FrequencyOrderTest, WhereReadsDoNotPredictRereadsTheyEarnNothing) {
  Teach(false);
  for (uint64_t ino = 1; ino <= 8; ++ino) Seal(ino);
  policy_->OnAccess(1);
  Seal(9);
  Seal(10);
  EXPECT_EQ(Order(), (std::vector<uint64_t>{2, 3, 4, 5, 6, 7, 8, 1, 9, 10}));
}

// With the full weight (Teach(true) leaves the clock at T; keys below are
// T + the ticks of each case).
TEST_F(FrequencyOrderTest, AChunkReadOnceOutlastsChunksStoredAfterIt) {
  Teach(true);
  for (uint64_t ino = 1; ino <= 8; ++ino) Seal(ino);  // ticks 1..8: keys 1..8
  policy_->OnAccess(1);                               // tick 9: 9 + 8 x 0.25 = 11
  Seal(9);                                            // tick 10: 10
  Seal(10);                                           // tick 11: 11, after 1 by number
  // LRU would take 1 before 9.
  EXPECT_EQ(Order(), (std::vector<uint64_t>{2, 3, 4, 5, 6, 7, 8, 9, 1, 10}));
}

TEST_F(FrequencyOrderTest, ReadsCountLessAndLessAndAReadChunkAgesStill) {
  Teach(true);
  for (uint64_t ino = 1; ino <= 16; ++ino) Seal(ino);   // keys 1..16
  policy_->OnAccess(1);                                 // tick 17: 17 + 16/4 x log2(2) = 21
  policy_->OnAccess(2);                                 // 18 + 4
  policy_->OnAccess(2);                                 // 19 + int(4 x log2(3)) = 25
  policy_->OnAccess(2);                                 // 20 + 4 x log2(4) = 28
  for (uint64_t ino = 17; ino <= 26; ++ino) Seal(ino);  // keys 21..30
  // Ties go by number.
  EXPECT_EQ(Order(), (std::vector<uint64_t>{3,  4, 5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                            16, 1, 17, 18, 19, 20, 21, 22, 23, 2,  24, 25, 26}));
}

TEST_F(FrequencyOrderTest, AChainStoredInOnePassGoesTailFirst) {
  Teach(true);
  Seal(1);
  Seal(2, 1);
  Seal(3, 2);  // keys 1, 2 - 2 x 1, 3 - 2 x 2
  Seal(4);
  Seal(5);  // 4, 5
  EXPECT_EQ(Order(), (std::vector<uint64_t>{3, 2, 1, 4, 5}));
  // Read front to back, a tick apart, the chain keeps its tail first:
  // 1: 6 + int(5/4) = 7, 2: 7 + 1 - 2 = 6, 3: 8 + 1 - 4 = 5 (before 5 by number).
  policy_->OnAccess(1);
  policy_->OnAccess(2);
  policy_->OnAccess(3);
  EXPECT_EQ(Order(), (std::vector<uint64_t>{4, 3, 5, 2, 1}));
}

TEST_F(FrequencyOrderTest, ChunksNotEvictableAreNeverChosen) {
  for (uint64_t ino = 1; ino <= 6; ++ino) Seal(ino);
  // 1 pinned, 2 leased by a reader: the Evictor's predicate says no.
  const std::set<uint64_t> held{1, 2};
  auto evictable = [&](uint64_t ino) { return !held.count(ino); };
  EXPECT_EQ(policy_->Victim(evictable), 3u);
  std::vector<uint64_t> passed;
  for (int round = 0; round < 4; ++round) {
    const uint64_t v = policy_->Victim([&](uint64_t ino) {
      if (evictable(ino)) return true;
      passed.push_back(ino);
      return false;
    });
    for (uint64_t ino : passed) policy_->Park(ino);
    passed.clear();
    ASSERT_NE(v, 0u);
    EXPECT_FALSE(held.count(v));
    policy_->OnRemove(v);
  }
  EXPECT_EQ(policy_->Victim(evictable), 0u);  // only the held ones are left
  policy_->UnparkAll();
  EXPECT_EQ(Order(), (std::vector<uint64_t>{1, 2}));
}

// Retention hints on small cases worked out by hand (8 chunks held: keep
// adds 8, drop takes 8; no evidence yet, so reads add nothing). Made by
// the policy's old name, which is the same policy.
class HintOrderTest : public FrequencyOrderTest {
 protected:
  HintOrderTest() { policy_ = std::move(*MakeEvictionPolicy("hinted", chains_)); }
};

TEST_F(HintOrderTest, TheOldNameIsTheDefaultPolicy) {
  EXPECT_STREQ(policy_->name(), "frequency");
}

TEST_F(HintOrderTest, KeepHoldsAChunkLongerAndDropSendsItFirst) {
  for (uint64_t ino = 1; ino <= 8; ++ino) Seal(ino);  // keys 1..8
  policy_->OnHint(1, RetentionHint::kKeep);           // 1 + 8 = 9
  policy_->OnHint(8, RetentionHint::kDrop);           // 8 - 8 = 0
  EXPECT_EQ(Order(), (std::vector<uint64_t>{8, 2, 3, 4, 5, 6, 7, 1}));
  // A hint is not a use: hinting again the same gives the same key.
  policy_->OnHint(1, RetentionHint::kKeep);
  EXPECT_EQ(Order(), (std::vector<uint64_t>{8, 2, 3, 4, 5, 6, 7, 1}));
  // None takes the hint back.
  policy_->OnHint(1, RetentionHint::kNone);
  EXPECT_EQ(Order(), (std::vector<uint64_t>{8, 1, 2, 3, 4, 5, 6, 7}));
}

TEST_F(HintOrderTest, AReadUndoesDropButNotKeep) {
  for (uint64_t ino = 1; ino <= 8; ++ino) Seal(ino);
  policy_->OnHint(1, RetentionHint::kDrop);
  policy_->OnHint(2, RetentionHint::kKeep);  // 2 + 8 = 10
  policy_->OnAccess(1);                      // tick 9: 9, no drop
  policy_->OnAccess(2);                      // tick 10: 10 + 8 = 18
  EXPECT_EQ(Order(), (std::vector<uint64_t>{3, 4, 5, 6, 7, 8, 1, 2}));
}

TEST_F(HintOrderTest, AKeptChunkStillGoesOnceItIsOldEnough) {
  for (uint64_t ino = 1; ino <= 40; ++ino) Seal(ino);  // keys 1..40
  policy_->OnHint(1, RetentionHint::kKeep);            // 1 + 40 = 41
  EXPECT_EQ(Order().back(), 1u);
  // Stored after it, chunks go after it; a client that hints every chunk
  // keep gains nothing over the others.
  for (uint64_t ino = 41; ino <= 80; ++ino) Seal(ino);  // keys 41..80
  const std::vector<uint64_t> order = Order();
  EXPECT_EQ(order.front(), 2u);
  EXPECT_EQ(order[39], 1u);  // key 41, before 41 by number
  for (uint64_t ino = 2; ino <= 40; ++ino) policy_->OnHint(ino, RetentionHint::kKeep);
  EXPECT_EQ(Order().front(), 1u);
}

// A shared prefix 1 under two conversations, A (2, 3) and B (4, 5), and
// 7, stored before B's next turn reads 1: 1 goes before 7 only if it took
// a drop.
class DropBranchTest : public HintOrderTest {
 protected:
  void SetUp() override {
    Seal(1);
    Seal(2, 1);
    Seal(3, 2);
    Seal(4, 1);
    Seal(5, 4);            // keys 1, 0, -1, 2, 1 (depth takes 2 a chunk)
    Seal(7);               // key 6
    policy_->OnAccess(1);  // 7
  }
  void Drop(std::initializer_list<uint64_t> tail_first) {
    for (uint64_t ino : tail_first) policy_->OnHint(ino, RetentionHint::kDrop);
  }
};

TEST_F(DropBranchTest, ADropStopsWhereALiveChainBranchesOff) {
  policy_->OnAccess(4);  // B read it: 8 - 2 = 6
  Drop({3, 2, 1});       // A ended (6 held): 3 -> -7, 2 -> -6; 1 keeps 7
  EXPECT_EQ(Order(), (std::vector<uint64_t>{3, 2, 5, 4, 7, 1}));
  Drop({5, 4, 1});  // B ended too: 5 -> -5, 4 -> 0, and now 1 -> 1
  EXPECT_EQ(Order(), (std::vector<uint64_t>{3, 2, 5, 4, 1, 7}));
}

TEST_F(DropBranchTest, BranchesNeverReadDoNotStopIt) {
  Drop({3, 2, 1});  // 4 and 5 were never read: 1 -> 1
  EXPECT_EQ(Order(), (std::vector<uint64_t>{3, 2, 1, 5, 4, 7}));
}

TEST_F(DropBranchTest, AChunkBeingWrittenUnderItStopsIt) {
  chains_.SetParent(9, 1);  // created under 1, not sealed: not in the order
  Drop({5, 4, 3, 2, 1});
  EXPECT_EQ(Order(), (std::vector<uint64_t>{3, 2, 5, 4, 7, 1}));
}

TEST_F(DropBranchTest, AWidelySharedPrefixNeverTakesOne) {
  for (uint64_t ino = 10; ino < 10 + FrequencyEviction::kDropFanout; ++ino) {
    Seal(ino, 1);
    policy_->OnHint(ino, RetentionHint::kDrop);
  }
  Drop({3, 2, 5, 4, 1});  // every extension dropped, but more than kDropFanout
  const std::vector<uint64_t> order = Order();
  EXPECT_EQ(order.back(), 1u);
  EXPECT_EQ(order[order.size() - 2], 7u);
}

TEST_F(HintOrderTest, AHintLeavesAParkedChunkParked) {
  for (uint64_t ino = 1; ino <= 4; ++ino) Seal(ino);
  policy_->Park(1);
  policy_->OnHint(1, RetentionHint::kDrop);  // 1 - 4
  EXPECT_EQ(Order(), (std::vector<uint64_t>{2, 3, 4}));
  policy_->Unpark(1);
  EXPECT_EQ(Order(), (std::vector<uint64_t>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace maru
