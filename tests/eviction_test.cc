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
#include "meta/eviction_policy.h"

namespace maru {
namespace {

// The order from its definition: every sealed chunk has a last use (seal,
// re-seal, read, new parent). LRU: least recently used first. Prefix: the
// tails (sealed chunks no sealed chunk names as parent) by last use, then
// every sealed chunk by last use.
class Reference {
 public:
  std::map<uint64_t, uint64_t> parent;    // every chunk not removed (0: none)
  std::map<uint64_t, uint64_t> last_use;  // the sealed ones
  uint64_t clock = 0;

  std::vector<uint64_t> Order(bool prefix) const {
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
  Workload(const std::string &policy, uint32_t seed) : prefix_(policy == "prefix"), rng_(seed) {
    policy_ = std::move(*MakeEvictionPolicy(policy, chains_));
  }

  void Step() {
    const int op = Pick(10);
    if (ref_.parent.empty() || op < 3) return Create();
    const uint64_t ino = Any();
    const bool sealed = ref_.last_use.count(ino);
    if (op < 6) return Seal(ino);
    if (op < 8 && sealed) return Read(ino);
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
  std::vector<uint64_t> Expected() const { return ref_.Order(prefix_); }

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
    ref_.last_use[ino] = ++ref_.clock;
  }
  void Read(uint64_t ino) {
    policy_->OnAccess(ino);
    ref_.last_use[ino] = ++ref_.clock;
  }
  void SetParent(uint64_t ino, uint64_t parent) {
    if (ref_.parent[ino] == parent) return;
    const bool sealed = ref_.last_use.count(ino);
    if (sealed) policy_->OnRemove(ino);
    chains_.SetParent(ino, parent);
    if (sealed) policy_->OnInsert(ino);
    ref_.parent[ino] = parent;
    if (sealed) ref_.last_use[ino] = ++ref_.clock;
  }
  void Remove(uint64_t ino) {
    if (ref_.last_use.count(ino)) policy_->OnRemove(ino);
    chains_.Remove(ino);
    ref_.parent.erase(ino);
    ref_.last_use.erase(ino);
  }

  const bool prefix_;
  std::mt19937_64 rng_;
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
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    Workload w(GetParam(), seed);
    for (int step = 1; step <= 3000; ++step) {
      w.Step();
      if (step % 50) continue;
      ASSERT_EQ(w.Walked(), w.Expected()) << "seed " << seed << " step " << step;
    }
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

INSTANTIATE_TEST_SUITE_P(Policies, EvictionOrderTest, testing::Values("lru", "prefix"));

}  // namespace
}  // namespace maru
