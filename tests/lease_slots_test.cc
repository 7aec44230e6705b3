// LeaseSlots without the index file's other parts: regions handed out per
// session and taken back, the slots a server honours (the client's `used`
// word, capped by the limit the server set), who holds a version, and the
// reads clients note in their rings.
#include "meta/lease_slots.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "util/clock.h"

namespace maru {
namespace {

class LeaseSlotsTest : public ::testing::Test {
 protected:
  void Make(uint32_t regions) {
    layout_.entries = 8;
    layout_.regions = regions;
    memory_.assign(layout_.bytes() / sizeof(uint64_t) + 1, 0);
    slots_ = std::make_unique<LeaseSlots>(memory_.data(), layout_);
  }
  void SetUp() override { Make(4); }

  // The region as its client sees it (`region` as Assign numbers it: 1-based).
  index::Region *Region(uint32_t region) {
    return index::RegionAt(memory_.data(), layout_, region - 1);
  }
  // What a client does to take a lease: the generation into a slot, and
  // `used` past it.
  void Take(uint32_t region, uint64_t slot, uint64_t gen) {
    Region(region)->slots[slot].store(gen);
    if (Region(region)->used.load() <= slot) Region(region)->used.store(slot + 1);
  }
  void Note(uint32_t region, uint64_t pos, uint64_t gen, uint64_t stamp_ns) {
    index::Region *r = Region(region);
    const uint64_t at = r->reads_head.load();
    index::ReadNote &n = index::Ring(r)[at % index::kRingSize];
    n.pos.store(pos);
    n.gen.store(gen);
    n.stamp_ns.store(stamp_ns);
    r->reads_head.store(at + 1);
  }

  index::Layout layout_;
  std::vector<uint64_t> memory_;
  std::unique_ptr<LeaseSlots> slots_;
};

TEST_F(LeaseSlotsTest, AnAssignedRegionCarriesItsLimitAndOwnerForTheClient) {
  LeaseSlots::Assigned a = slots_->Assign(1, 1000, 10);
  ASSERT_NE(a.region, 0u);
  EXPECT_NE(a.token, 0u);
  EXPECT_EQ(Region(a.region)->owner.load(), a.token);
  EXPECT_EQ(Region(a.region)->limit.load(), 10u);
  // A limit past the region's slots is cut to them.
  LeaseSlots::Assigned b = slots_->Assign(2, 1000, 1u << 30);
  EXPECT_EQ(Region(b.region)->limit.load(), layout_.slots_per_region);
  EXPECT_EQ(slots_->assigned(), 2u);
}

TEST_F(LeaseSlotsTest, EachSessionGetsARegionOfItsOwnUntilNoneIsLeft) {
  Make(2);
  LeaseSlots::Assigned a = slots_->Assign(1, 1000, 10), b = slots_->Assign(2, 1001, 10);
  ASSERT_NE(a.region, 0u);
  ASSERT_NE(b.region, 0u);
  EXPECT_NE(a.region, b.region);
  EXPECT_NE(a.token, b.token);
  EXPECT_EQ(slots_->Assign(3, 1002, 10).region, 0u);  // it leases by message
  slots_->Drop(1);
  EXPECT_EQ(Region(a.region)->owner.load(), 0u);
  EXPECT_EQ(slots_->Assign(3, 1002, 10).region, a.region);
}

TEST_F(LeaseSlotsTest, ASessionAskingAgainGetsItsRegionBackEmptied) {
  LeaseSlots::Assigned a = slots_->Assign(1, 1000, 10);
  Take(a.region, 0, 42);
  ASSERT_TRUE(slots_->Holds(42));
  LeaseSlots::Assigned again = slots_->Assign(1, 1000, 10);
  EXPECT_EQ(again.region, a.region);
  EXPECT_EQ(Region(a.region)->owner.load(), again.token);
  EXPECT_EQ(Region(a.region)->slots[0].load(), 0u);
  EXPECT_FALSE(slots_->Holds(42));
  EXPECT_EQ(slots_->assigned(), 1u);
}

TEST_F(LeaseSlotsTest, OnlySlotsBelowTheClientsUsedAndTheServersLimitHold) {
  LeaseSlots::Assigned a = slots_->Assign(1, 1000, 4);
  Take(a.region, 2, 42);
  EXPECT_TRUE(slots_->Holds(42));
  EXPECT_EQ(slots_->Held(1), 1u);
  Region(a.region)->used.store(2);  // the client's word hides its own slot
  EXPECT_FALSE(slots_->Holds(42));
  EXPECT_EQ(slots_->Held(1), 0u);
  // Past the limit nothing holds, whatever the client's `used` says.
  Region(a.region)->slots[6].store(43);
  Region(a.region)->used.store(1000000);
  EXPECT_TRUE(slots_->Holds(42));
  EXPECT_FALSE(slots_->Holds(43));
  EXPECT_EQ(slots_->Held(2), 0u);  // no region: nothing held
}

TEST_F(LeaseSlotsTest, ADroppedSessionsLeasesEndWithIt) {
  LeaseSlots::Assigned a = slots_->Assign(1, 1000, 10);
  Take(a.region, 0, 42);
  Take(a.region, 1, 43);
  EXPECT_EQ(slots_->Held(1), 2u);
  slots_->Drop(1);
  EXPECT_FALSE(slots_->Holds(42));
  EXPECT_FALSE(slots_->Holds(43));
  EXPECT_EQ(slots_->Held(1), 0u);
  EXPECT_EQ(Region(a.region)->slots[0].load(), 0u);
  slots_->Drop(1);  // twice: nothing more happens
  EXPECT_EQ(slots_->assigned(), 0u);
}

TEST_F(LeaseSlotsTest, HoldersOfNamesTheUidOfEachSessionHoldingAVersion) {
  LeaseSlots::Assigned a = slots_->Assign(1, 1000, 10), b = slots_->Assign(2, 1001, 10);
  Take(a.region, 0, 42);
  Take(a.region, 1, 42);  // twice in one region: its uid once
  Take(b.region, 0, 42);
  std::vector<uint32_t> holders = slots_->HoldersOf(42);
  std::sort(holders.begin(), holders.end());
  EXPECT_EQ(holders, (std::vector<uint32_t>{1000, 1001}));
  EXPECT_TRUE(slots_->HoldersOf(7).empty());
}

TEST_F(LeaseSlotsTest, OneUidGetsAtMostItsShareOfRegionsButRootIsNotCapped) {
  slots_->set_max_per_uid(1);
  EXPECT_NE(slots_->Assign(1, 1000, 10).region, 0u);
  EXPECT_EQ(slots_->Assign(2, 1000, 10).region, 0u);
  EXPECT_NE(slots_->Assign(3, 1001, 10).region, 0u);
  EXPECT_NE(slots_->Assign(4, 0, 10).region, 0u);
  EXPECT_NE(slots_->Assign(5, 0, 10).region, 0u);
  slots_->Drop(1);  // its share is free again
  EXPECT_NE(slots_->Assign(2, 1000, 10).region, 0u);
}

TEST_F(LeaseSlotsTest, NotedReadsAreDrainedOnceOldestFirstAndForgedStampsAreIgnored) {
  LeaseSlots::Assigned a = slots_->Assign(1, 1000, 10), b = slots_->Assign(2, 1001, 10);
  const uint64_t now = static_cast<uint64_t>(MonotonicNs());
  Note(a.region, 5, 50, now + 3);
  Note(b.region, 6, 60, now + 1);
  Note(a.region, 7, 70, now + 2);
  Note(b.region, 8, 80, now + 1000000000000ull);  // later than any read can be
  while (static_cast<uint64_t>(MonotonicNs()) <= now + 3) {
  }
  std::vector<LeaseSlots::Read> reads = slots_->DrainReads();
  ASSERT_EQ(reads.size(), 3u);
  EXPECT_EQ(reads[0].gen, 60u);
  EXPECT_EQ(reads[1].gen, 70u);
  EXPECT_EQ(reads[2].gen, 50u);
  EXPECT_EQ(reads[2].pos, 5u);
  EXPECT_TRUE(slots_->DrainReads().empty());
}

}  // namespace
}  // namespace maru
