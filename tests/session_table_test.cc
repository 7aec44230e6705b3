// SessionTable without the engine: sessions by id, counted by uid (the
// per-uid caps read the count), and which ones a heartbeat deadline expires.
#include "meta/session_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace maru {
namespace {

constexpr int64_t kSecond = 1000000000;

TEST(SessionTable, ASessionIsFoundByItsIdUntilRemoved) {
  SessionTable table;
  Session *s = table.Create(7, 1000);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->id, 7u);
  EXPECT_EQ(s->uid, 1000u);
  EXPECT_EQ(table.Find(7), s);
  EXPECT_EQ(table.Find(8), nullptr);
  EXPECT_EQ(table.size(), 1u);
  table.Remove(7);
  EXPECT_EQ(table.Find(7), nullptr);
  EXPECT_EQ(table.size(), 0u);
}

TEST(SessionTable, SessionsAreCountedByTheirUid) {
  SessionTable table;
  table.Create(1, 1000);
  table.Create(2, 1000);
  table.Create(3, 1001);
  EXPECT_EQ(table.CountOf(1000), 2u);
  EXPECT_EQ(table.CountOf(1001), 1u);
  EXPECT_EQ(table.CountOf(0), 0u);
  table.Remove(1);
  EXPECT_EQ(table.CountOf(1000), 1u);
  table.Remove(2);
  EXPECT_EQ(table.CountOf(1000), 0u);
  EXPECT_EQ(table.CountOf(1001), 1u);
}

TEST(SessionTable, RemovingAnUnknownSessionChangesNothing) {
  SessionTable table;
  table.Create(1, 1000);
  table.Remove(2);
  table.Remove(1);
  table.Remove(1);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.CountOf(1000), 0u);
}

TEST(SessionTable, SessionsExpireOnlyPastTheTimeout) {
  SessionTable table;
  table.Create(1, 0)->last_seen_ns = 10 * kSecond;
  table.Create(2, 0)->last_seen_ns = 14 * kSecond;
  EXPECT_TRUE(table.Expired(15 * kSecond, 5 * kSecond).empty());  // 5 s exactly: not yet
  std::vector<uint64_t> expired = table.Expired(15 * kSecond + 1, 5 * kSecond);
  EXPECT_EQ(expired, std::vector<uint64_t>{1});
  expired = table.Expired(30 * kSecond, 5 * kSecond);
  std::sort(expired.begin(), expired.end());
  EXPECT_EQ(expired, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(table.size(), 2u);  // expiring is the engine's call: nothing is removed
}

TEST(SessionTable, SeenAllGivesEverySessionAFullTimeoutFromNow) {
  SessionTable table;
  table.Create(1, 0)->last_seen_ns = 0;
  table.Create(2, 1000)->last_seen_ns = 3 * kSecond;
  table.SeenAll(100 * kSecond);
  EXPECT_TRUE(table.Expired(105 * kSecond, 5 * kSecond).empty());
  EXPECT_EQ(table.Expired(105 * kSecond + 1, 5 * kSecond).size(), 2u);
}

TEST(SessionTable, ForEachVisitsEverySessionOnce) {
  SessionTable table;
  for (uint64_t id = 1; id <= 5; ++id) table.Create(id, static_cast<uint32_t>(id % 2));
  std::vector<uint64_t> seen;
  table.ForEach([&](const Session &s) { seen.push_back(s.id); });
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace maru
