// PartTable: the waits for layer-wise parts, shared out per uid.
#include <gtest/gtest.h>

#include "meta/part_table.h"

// Layer-wise waits: sessions cost nothing, so a uid opening many of them
// still gets only its share of the waits; others and root still wait.
TEST(PartTableTest, OneUidCannotTakeEveryWait) {
  maru::PartTable table;
  const uint32_t per_session = maru::PartTable::kMaxWaitersPerSession;
  const uint64_t sessions = maru::PartTable::kMaxWaitersPerUid / per_session;
  for (uint64_t s = 1; s <= sessions; ++s)
    for (uint32_t i = 0; i < per_session; ++i) ASSERT_EQ(table.AddWaiter(s, 1000), 0);
  EXPECT_EQ(table.AddWaiter(sessions + 1, 1000), EMFILE);
  EXPECT_EQ(table.AddWaiter(sessions + 2, 1001), 0);
  EXPECT_EQ(table.AddWaiter(sessions + 3, 0), 0);
  table.RemoveWaiter(1, 1000);
  EXPECT_EQ(table.AddWaiter(sessions + 1, 1000), 0);
}
