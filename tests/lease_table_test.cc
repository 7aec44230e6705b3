// LeaseTable: granting, taking back only by the holder, ids that never repeat
// or wrap, and taking a whole session's leases. HeldLeases (a client's
// tracked leases): handles never 0, stale ones find nothing, records stay put.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "client/held_leases.h"
#include "meta/lease_table.h"

namespace maru {
namespace {

TEST(LeaseTable, EmptyTableHoldsNothing) {
  LeaseTable t;
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.Find(0), nullptr);
  EXPECT_EQ(t.Find(1), nullptr);
  EXPECT_EQ(t.Find(UINT64_MAX), nullptr);
  EXPECT_FALSE(t.Take(1, 1).has_value());
}

TEST(LeaseTable, GrantedLeasesAreFoundWithWhatTheyHold) {
  LeaseTable t;
  const uint64_t id = t.Grant(7, 42, 3, 0);
  EXPECT_NE(id, 0u);
  const Lease *lease = t.Find(id);
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->id, id);
  EXPECT_EQ(lease->session, 7u);
  EXPECT_EQ(lease->ino, 42u);
  EXPECT_EQ(lease->gen, 3u);
  EXPECT_EQ(t.size(), 1u);
}

TEST(LeaseTable, OnlyTheHoldingSessionTakesALeaseAndOnlyOnce) {
  LeaseTable t;
  const uint64_t id = t.Grant(7, 42, 3, 0);
  EXPECT_FALSE(t.Take(id, 8).has_value());  // another session's
  EXPECT_FALSE(t.Take(id, 0).has_value());
  EXPECT_NE(t.Find(id), nullptr);  // still held
  std::optional<Lease> taken = t.Take(id, 7);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->id, id);
  EXPECT_EQ(taken->ino, 42u);
  EXPECT_EQ(taken->gen, 3u);
  EXPECT_EQ(t.Find(id), nullptr);
  EXPECT_FALSE(t.Take(id, 7).has_value());  // a repeated release
  EXPECT_EQ(t.size(), 0u);
}

TEST(LeaseTable, SameChunkLeasedTwiceGetsTwoLeases) {
  LeaseTable t;
  const uint64_t a = t.Grant(1, 10, 5, 0), b = t.Grant(1, 10, 5, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(t.size(), 2u);
  ASSERT_TRUE(t.Take(a, 1).has_value());
  EXPECT_NE(t.Find(b), nullptr);
}

TEST(LeaseTable, IdsNeverRepeatEvenAfterRelease) {
  LeaseTable t;
  std::set<uint64_t> ids;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t id = t.Grant(1, static_cast<uint64_t>(i), 1, 0);
    ASSERT_NE(id, 0u);
    ASSERT_TRUE(ids.insert(id).second) << "id " << id << " granted twice";
    if (i % 2) {
      ASSERT_TRUE(t.Take(id, 1).has_value());
    }
  }
  EXPECT_EQ(t.size(), 5000u);
}

TEST(LeaseTable, IdsStartFarFromWrapping) {
  // Ids start at a random point in the lower quarter of the range: a server
  // could grant for centuries before reaching the top.
  for (int i = 0; i < 16; ++i) {
    LeaseTable t;
    const uint64_t id = t.Grant(1, 1, 1, 0);
    EXPECT_GE(id, 1u);
    EXPECT_LE(id, (UINT64_MAX >> 2) + 1);
  }
}

TEST(LeaseTable, TablesStartAtDifferentIds) {
  // What makes an id from before a restart name no lease after it. Two
  // equal 62-bit random draws are not a thing a test run will see.
  LeaseTable before, after;
  const uint64_t old_id = before.Grant(1, 1, 1, 0);
  EXPECT_NE(after.Grant(1, 1, 1, 0), old_id);
  EXPECT_EQ(after.Find(old_id), nullptr);
  EXPECT_FALSE(after.Take(old_id, 1).has_value());
}

TEST(LeaseTable, ExpiringASessionTakesItsRecordedIdsAndNoOthers) {
  // As the engine expires a session: it walks the ids the session recorded
  // (some already released) and takes each; other sessions keep theirs.
  LeaseTable t;
  std::vector<uint64_t> recorded;
  for (uint64_t i = 0; i < 300; ++i) {
    const uint64_t id = t.Grant(i % 3, i, 1, 0);
    if (i % 3 == 1) recorded.push_back(id);
  }
  for (size_t i = 0; i < recorded.size(); i += 4) ASSERT_TRUE(t.Take(recorded[i], 1).has_value());
  size_t taken = 0;
  for (uint64_t id : recorded) taken += t.Take(id, 1).has_value();
  EXPECT_EQ(taken, 75u);
  EXPECT_EQ(t.size(), 200u);
  for (uint64_t id : recorded) EXPECT_EQ(t.Find(id), nullptr);
}

TEST(HeldLeases, StaleHandlesFindNothingAndRecordsStayPut) {
  HeldLeases t;
  uint64_t first = 0;
  HeldLeases::Record *r = t.Add(5, &first);
  ASSERT_NE(r, nullptr);
  EXPECT_NE(first, 0u);
  EXPECT_EQ(first & 7, 5u);  // the tag in the low bits
  EXPECT_LT(first, uint64_t{1} << 63);
  EXPECT_EQ(t.Find(first), r);
  t.Erase(r);
  EXPECT_EQ(t.Find(first), nullptr);
  EXPECT_EQ(t.Find(0), nullptr);  // a free record holds 0: no handle finds it
  // The record is reused under a new handle; the old one still finds nothing.
  uint64_t second = 0;
  HeldLeases::Record *again = t.Add(5, &second);
  EXPECT_EQ(again, r);
  EXPECT_NE(second, first);
  EXPECT_EQ(t.Find(first), nullptr);
  EXPECT_EQ(t.Find(second), again);
  // Many more: the table grows by blocks, and no record moves.
  std::vector<std::pair<uint64_t, HeldLeases::Record *>> held{{second, again}};
  for (int i = 0; i < 2000; ++i) {
    uint64_t h = 0;
    HeldLeases::Record *x = t.Add(static_cast<uint64_t>(i % 8), &h);
    ASSERT_NE(x, nullptr);
    x->ino = static_cast<uint64_t>(i);
    held.push_back({h, x});
  }
  std::set<uint64_t> handles;
  for (const auto &[h, x] : held) {
    EXPECT_EQ(t.Find(h), x);
    handles.insert(h);
  }
  EXPECT_EQ(handles.size(), held.size());
  // Every other one erased: ForEach visits exactly the rest.
  for (size_t i = 0; i < held.size(); i += 2) t.Erase(held[i].second);
  size_t seen = 0;
  t.ForEach([&](const HeldLeases::Record &x) {
    ++seen;
    EXPECT_NE(t.Find(x.handle), nullptr);
  });
  EXPECT_EQ(seen, held.size() / 2);
  for (size_t i = 0; i < held.size(); ++i)
    EXPECT_EQ(t.Find(held[i].first) != nullptr, i % 2 == 1) << i;
}

}  // namespace
}  // namespace maru
