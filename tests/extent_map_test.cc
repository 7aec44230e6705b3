// ExtentMap: which piece of which device holds a range of a chunk, checked
// at its edges (empty, clipping, boundaries, huge ranges) and against a
// byte-by-byte model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "alloc/extent_map.h"

namespace maru {
namespace {

struct Piece {
  uint32_t device;
  uint64_t device_offset, length, file_offset;
  bool operator==(const Piece &) const = default;
};

std::vector<Piece> Pieces(const ExtentMap &map, uint64_t off, uint64_t len) {
  std::vector<Piece> out;
  map.ForEachPiece(
      off, len,
      [&](uint32_t device, uint64_t device_offset, uint64_t length, uint64_t file_offset) {
        out.push_back({device, device_offset, length, file_offset});
      });
  return out;
}

TEST(ExtentMap, EmptyMapHasNoPieces) {
  ExtentMap empty;
  EXPECT_EQ(empty.length(), 0u);
  EXPECT_TRUE(empty.extents().empty());
  EXPECT_TRUE(Pieces(empty, 0, 0).empty());
  EXPECT_TRUE(Pieces(empty, 0, 4096).empty());
  EXPECT_TRUE(Pieces(empty, UINT64_MAX, UINT64_MAX).empty());
  ExtentMap from_empty_list{ExtentList{}};
  EXPECT_EQ(from_empty_list.length(), 0u);
  EXPECT_TRUE(Pieces(from_empty_list, 0, 1).empty());
}

TEST(ExtentMap, ZeroLengthRequestHasNoPieces) {
  ExtentMap map({{0, 4096, 100}});
  EXPECT_TRUE(Pieces(map, 0, 0).empty());
  EXPECT_TRUE(Pieces(map, 50, 0).empty());
}

TEST(ExtentMap, RangesAreClippedToTheMappedLength) {
  ExtentMap map({{3, 4096, 100}});
  EXPECT_EQ(map.length(), 100u);
  EXPECT_EQ(Pieces(map, 0, 100), (std::vector<Piece>{{3, 4096, 100, 0}}));
  EXPECT_EQ(Pieces(map, 90, 50), (std::vector<Piece>{{3, 4186, 10, 90}}));
  EXPECT_EQ(Pieces(map, 99, 1), (std::vector<Piece>{{3, 4195, 1, 99}}));
  EXPECT_TRUE(Pieces(map, 100, 1).empty());  // at the end
  EXPECT_TRUE(Pieces(map, 101, 1).empty());  // past it
}

TEST(ExtentMap, HugeRangesNeitherWrapNorReadPastTheEnd) {
  ExtentMap map({{0, 0, 10}, {1, 20, 10}});
  // off + len overflows 64 bits: still clipped to what is mapped.
  EXPECT_EQ(Pieces(map, 5, UINT64_MAX), (std::vector<Piece>{{0, 5, 5, 5}, {1, 20, 10, 10}}));
  EXPECT_EQ(Pieces(map, 0, UINT64_MAX).size(), 2u);
  EXPECT_TRUE(Pieces(map, UINT64_MAX, UINT64_MAX).empty());
  EXPECT_TRUE(Pieces(map, UINT64_MAX, 1).empty());
}

TEST(ExtentMap, ExtentsAtTheTopOfADeviceMapWithoutOverflow) {
  const uint64_t top = UINT64_MAX - 99;
  ExtentMap map({{7, top, 100}});
  EXPECT_EQ(Pieces(map, 60, 1000), (std::vector<Piece>{{7, top + 60, 40, 60}}));
}

TEST(ExtentMap, PiecesSplitAtExtentBoundariesExactly) {
  ExtentMap map({{0, 1000, 10}, {1, 0, 20}, {0, 5000, 30}});
  EXPECT_EQ(map.length(), 60u);
  // Starting exactly on each boundary.
  EXPECT_EQ(Pieces(map, 10, 1), (std::vector<Piece>{{1, 0, 1, 10}}));
  EXPECT_EQ(Pieces(map, 30, 1), (std::vector<Piece>{{0, 5000, 1, 30}}));
  // Ending exactly on one: no empty piece after it.
  EXPECT_EQ(Pieces(map, 0, 10), (std::vector<Piece>{{0, 1000, 10, 0}}));
  EXPECT_EQ(Pieces(map, 5, 25), (std::vector<Piece>{{0, 1005, 5, 5}, {1, 0, 20, 10}}));
  // Across all three.
  EXPECT_EQ(Pieces(map, 9, 22),
            (std::vector<Piece>{{0, 1009, 1, 9}, {1, 0, 20, 10}, {0, 5000, 1, 30}}));
}

TEST(ExtentMap, AppendExtendsTheMap) {
  ExtentMap map({{0, 0, 10}});
  map.Append({});
  EXPECT_EQ(map.length(), 10u);
  map.Append({{2, 100, 5}, {3, 200, 5}});
  EXPECT_EQ(map.length(), 20u);
  EXPECT_EQ(map.extents().size(), 3u);
  EXPECT_EQ(Pieces(map, 8, 100),
            (std::vector<Piece>{{0, 8, 2, 8}, {2, 100, 5, 10}, {3, 200, 5, 15}}));
}

TEST(ExtentMap, ZeroLengthExtentsMapNoBytes) {
  // The allocator never hands out empty extents, but a record could hold
  // one: it must not shift the bytes of the extents after it. (It may be
  // reported as a piece of length 0, which callers copy nothing for.)
  ExtentMap map({{0, 0, 10}, {1, 500, 0}, {2, 100, 10}});
  EXPECT_EQ(map.length(), 20u);
  EXPECT_EQ(Pieces(map, 10, 5), (std::vector<Piece>{{2, 100, 5, 10}}));
  uint64_t covered = 0;
  for (const Piece &p : Pieces(map, 5, 10)) {
    EXPECT_TRUE(p.length == 0 || p.device != 1u) << "bytes mapped to an empty extent";
    EXPECT_EQ(p.file_offset, 5 + covered);
    covered += p.length;
  }
  EXPECT_EQ(covered, 10u);
}

// Every byte of every random range lands where a per-byte model says.
TEST(ExtentMap, MatchesAByteModelOnRandomRanges) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    ExtentList extents;
    std::vector<std::pair<uint32_t, uint64_t>> model;  // file byte -> (device, offset)
    const int count = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < count; ++i) {
      Extent e{static_cast<uint32_t>(rng() % 4), rng() % 100000, 1 + rng() % 64};
      extents.push_back(e);
      for (uint64_t b = 0; b < e.length; ++b) model.push_back({e.device, e.offset + b});
    }
    ExtentMap map(extents);
    ASSERT_EQ(map.length(), model.size());
    for (int q = 0; q < 100; ++q) {
      const uint64_t off = rng() % (model.size() + 10), len = rng() % (model.size() + 10);
      uint64_t expect_off = off;
      for (const Piece &p : Pieces(map, off, len)) {
        ASSERT_GT(p.length, 0u);
        ASSERT_EQ(p.file_offset, expect_off);
        for (uint64_t b = 0; b < p.length; ++b)
          ASSERT_EQ(model[p.file_offset + b], std::make_pair(p.device, p.device_offset + b));
        expect_off += p.length;
      }
      const uint64_t want_end =
          off >= model.size() ? off : std::min<uint64_t>(off + len, model.size());
      ASSERT_EQ(expect_off, want_end) << "off " << off << " len " << len;
    }
  }
}

// ExtentList keeps one extent in place and moves to the heap past it: the
// same contents as a std::vector through every kind of change.
TEST(ExtentList, BehavesAsAVector) {
  std::mt19937_64 rng(5);
  ExtentList list;
  std::vector<Extent> want;
  auto same = [&] {
    return list.size() == want.size() && std::equal(list.begin(), list.end(), want.begin());
  };
  for (int step = 0; step < 5000; ++step) {
    const Extent e{static_cast<uint32_t>(rng() % 3), rng() % 1000, 1 + rng() % 100};
    switch (rng() % 7) {
      case 0:
      case 1:
        list.push_back(e);
        want.push_back(e);
        break;
      case 2:
        if (!want.empty()) {
          const size_t at = rng() % want.size();
          list.erase(list.begin() + at);
          want.erase(want.begin() + static_cast<long>(at));
        }
        break;
      case 3: {
        const std::vector<Extent> more(rng() % 3, e);
        const size_t at = want.empty() ? 0 : rng() % want.size();
        list.insert(list.begin() + at, more.begin(), more.end());
        want.insert(want.begin() + static_cast<long>(at), more.begin(), more.end());
        break;
      }
      case 4: {
        ExtentList copy = list;  // copy, then move back
        ASSERT_TRUE(copy == list);
        list = std::move(copy);
        ASSERT_TRUE(copy.empty());
        break;
      }
      case 5:
        if (rng() % 8 == 0) {
          list.clear();
          want.clear();
        }
        break;
      default: {
        ExtentList moved(std::move(list));
        list = ExtentList(moved.begin(), moved.end());
        break;
      }
    }
    ASSERT_TRUE(same()) << "step " << step;
  }
  const ExtentList one{{1, 4096, 8192}};
  EXPECT_EQ(one.size(), 1u);
  EXPECT_EQ(one.capacity(), 1u);  // in place
  EXPECT_EQ(TotalLength(one), 8192u);
}

}  // namespace
}  // namespace maru
