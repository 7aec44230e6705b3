// NamespaceTree without the engine: linking and unlinking, rebuilding after a
// load (orphans, clashes), resolving each kind of Ref with the permission
// checks of a path walk, paths and ancestry.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "meta/inode_slab.h"
#include "meta/namespace_tree.h"
#include "tree_builder.h"
#include "util/path.h"

namespace maru {
namespace {

const Caller kRoot{0, 0, {}, 0};
const Caller kAlice{1000, 1000, {}, 0};
// maru-fuse asserting alice: the kernel already checked its lookups.
const Caller kAliceViaFuse{1000, 1000, {}, 0, true};

class NamespaceTreeTest : public ::testing::Test {
 protected:
  void SetUp() override { Add(kRootIno, 0, "", S_IFDIR | 0755); }

  // A new inode owned by uid 0, not linked anywhere.
  Inode *Add(uint64_t ino, uint64_t parent, const std::string &name, uint32_t mode) {
    return AdoptInode(&tree_, ino, parent, name, mode);
  }
  Inode *Dir(uint64_t ino, Inode *parent, const std::string &name, uint32_t perm = 0755) {
    return LinkDir(&tree_, ino, parent, name, perm);
  }
  Inode *File(uint64_t ino, Inode *parent, const std::string &name) {
    Inode *f = Add(ino, 0, "", S_IFREG | 0644);
    tree_.Link(parent, f, name);
    return f;
  }

  static rpc::Ref Path(const std::string &path) {
    rpc::Ref r;
    r.set_path(path);
    return r;
  }
  static rpc::Ref In(uint64_t dir, const std::string &name) {
    rpc::Ref r;
    r.set_ino(dir);
    r.set_name(name);
    return r;
  }
  static rpc::Ref Ino(uint64_t ino) {
    rpc::Ref r;
    r.set_ino(ino);
    return r;
  }

  int Error(const rpc::Ref &ref, const Caller &caller = kRoot) {
    Result<Inode *> r = tree_.Resolve(ref, caller);
    return r.ok() ? 0 : r.status().errnum();
  }
  uint64_t InoOf(const rpc::Ref &ref, const Caller &caller = kRoot) {
    Result<Inode *> r = tree_.Resolve(ref, caller);
    return r.ok() ? (*r)->ino : 0;
  }

  NamespaceTree tree_;
};

TEST(NamespaceTreeEmpty, HasNoRootAndResolvesNoInode) {
  NamespaceTree tree;
  EXPECT_EQ(tree.size(), 0u);
  EXPECT_EQ(tree.root(), nullptr);
  EXPECT_EQ(tree.Find(kRootIno), nullptr);
  EXPECT_EQ(tree.Release(kRootIno), nullptr);
  EXPECT_TRUE(tree.LinkAll().empty());
  rpc::Ref ref;  // no path, no name, no inode: the root, which is not there
  Result<Inode *> r = tree.Resolve(ref, kRoot);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().errnum(), ESTALE);
}

TEST_F(NamespaceTreeTest, LinkAndUnlinkKeepEntriesAndSubdirCounts) {
  Inode *root = tree_.root();
  Inode *a = Dir(2, root, "a");
  Inode *f = File(3, root, "f");
  EXPECT_EQ(root->subdirs, 1u);  // files do not count
  EXPECT_EQ(tree_.Child(*root, "a"), a);
  EXPECT_EQ(tree_.Child(*root, "f"), f);
  EXPECT_EQ(tree_.Child(*root, "missing"), nullptr);
  EXPECT_EQ(a->parent, kRootIno);
  EXPECT_EQ(a->name, "a");
  tree_.Unlink(a);
  EXPECT_EQ(root->subdirs, 0u);
  EXPECT_EQ(tree_.Child(*root, "a"), nullptr);
  tree_.Unlink(a);  // twice: nothing more to do
  EXPECT_EQ(root->subdirs, 0u);
  EXPECT_EQ(tree_.size(), 3u);  // unlinked, still owned
  std::unique_ptr<Inode> gone = tree_.Release(2);
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(gone.get(), a);
  EXPECT_EQ(tree_.Find(2), nullptr);
  EXPECT_EQ(tree_.Release(2), nullptr);
  EXPECT_EQ(tree_.size(), 2u);
}

TEST_F(NamespaceTreeTest, UnlinkingAReplacedInodeLeavesTheNewOneInPlace) {
  Inode *root = tree_.root();
  Inode *old_file = File(2, root, "x");
  // A rename over "x" links the new inode before the old one is dropped.
  Inode *new_file = File(3, root, "x");
  tree_.Unlink(old_file);
  EXPECT_EQ(tree_.Child(*root, "x"), new_file);
}

TEST_F(NamespaceTreeTest, UnlinkOfAnInodeWhoseParentIsGoneIsHarmless) {
  Inode *stray = Add(9, 77, "lost", S_IFREG | 0644);
  tree_.Unlink(stray);
  EXPECT_EQ(tree_.Find(9), stray);
}

TEST_F(NamespaceTreeTest, LinkAllRebuildsEntriesAndReturnsOrphans) {
  Add(2, kRootIno, "d", S_IFDIR | 0755);
  Add(3, 2, "inner", S_IFDIR | 0755);
  Add(4, 3, "file", S_IFREG | 0644);
  Add(5, 99, "parent-missing", S_IFREG | 0644);
  Add(6, 4, "under-a-file", S_IFREG | 0644);
  Add(7, 2, "clash", S_IFREG | 0644);
  Add(8, 2, "clash", S_IFREG | 0644);
  std::vector<Inode *> orphans = tree_.LinkAll();
  std::vector<uint64_t> inos;
  for (Inode *o : orphans) inos.push_back(o->ino);
  std::sort(inos.begin(), inos.end());
  ASSERT_EQ(inos.size(), 3u);
  EXPECT_EQ(inos[0], 5u);
  EXPECT_EQ(inos[1], 6u);
  EXPECT_TRUE(inos[2] == 7 || inos[2] == 8) << inos[2];  // one of the two names wins
  EXPECT_EQ(InoOf(Path("/d/inner/file")), 4u);
  EXPECT_EQ(tree_.root()->subdirs, 1u);
  EXPECT_EQ(tree_.Find(2)->subdirs, 1u);
  EXPECT_EQ(tree_.Find(2)->children.size(), 2u);  // inner and one clash
  EXPECT_NE(InoOf(Path("/d/clash")), inos[2]);
}

// A load links in number order: names come mostly in order (appended at
// the end of a directory), but not always; both must end up findable, in
// name order, with the lower-numbered of two clashing names kept.
TEST_F(NamespaceTreeTest, LinkAllInOrderTakesNamesInAnyOrder) {
  std::vector<Inode *> order{Add(2, kRootIno, "d", S_IFDIR | 0755)};
  const std::vector<std::string> names = {"c03", "c05", "c01", "c05", "c09", "c02", "c00"};
  for (size_t i = 0; i < names.size(); ++i)
    order.push_back(Add(10 + i, 2, names[i], S_IFREG | 0644));
  std::vector<Inode *> orphans = tree_.LinkAll(order);
  ASSERT_EQ(orphans.size(), 1u);
  EXPECT_EQ(orphans[0]->ino, 13u);  // the second "c05"
  EXPECT_EQ(InoOf(Path("/d/c05")), 11u);
  std::vector<std::string> listed;
  for (const auto &[name, ino] : tree_.Find(2)->children) {
    listed.emplace_back(name);
    EXPECT_EQ(InoOf(Path("/d/" + std::string(name))), ino);
  }
  EXPECT_EQ(listed, (std::vector<std::string>{"c00", "c01", "c02", "c03", "c05", "c09"}));
  EXPECT_EQ(tree_.root()->subdirs, 1u);
}

// What several writers made at once in one directory comes to a load as
// ascending runs of names interleaved (writer 0's batch, writer 1's, ...),
// with now and then a name out of its runs and a clash: all are linked in
// name order, each clash to the lower number.
TEST_F(NamespaceTreeTest, LinkAllTakesInterleavedRunsOfNames) {
  std::vector<Inode *> order{Add(2, kRootIno, "d", S_IFDIR | 0755)};
  std::vector<std::string> names;
  constexpr int kWriters = 4, kBatch = 16, kNames = 4000;
  char name[16];
  for (int first = 0; first < kNames; first += kWriters * kBatch)
    for (int w = 0; w < kWriters; ++w)
      for (int i = first + w; i < first + kWriters * kBatch && i < kNames; i += kWriters) {
        snprintf(name, sizeof(name), "c%05d", i);
        names.push_back(name);
        if (i % 97 == 0) names.push_back("c00000");  // a clash, far back
        if (i % 89 == 0) {
          snprintf(name, sizeof(name), "c%05d", i + 3);  // a clash ahead (made again later)
          names.push_back(name);
        }
      }
  uint64_t ino = 10;
  std::map<std::string, uint64_t> first_of;
  for (const std::string &n : names) {
    order.push_back(Add(ino, 2, n, S_IFREG | 0644));
    first_of.try_emplace(n, ino++);
  }
  std::vector<Inode *> orphans = tree_.LinkAll(order);
  EXPECT_EQ(orphans.size(), names.size() - first_of.size());
  for (Inode *o : orphans) EXPECT_NE(first_of[o->name], o->ino) << o->name;
  std::vector<std::string> listed;
  for (const auto &[n, i] : tree_.Find(2)->children) {
    listed.emplace_back(n);
    EXPECT_EQ(i, first_of[std::string(n)]) << n;
  }
  std::vector<std::string> expected;
  for (const auto &[n, i] : first_of) expected.push_back(n);
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(InoOf(Path("/d/c03999")), first_of["c03999"]);
}

TEST_F(NamespaceTreeTest, ResolvesPathsNamesAndInodes) {
  Inode *a = Dir(2, tree_.root(), "a");
  Inode *b = Dir(3, a, "b");
  File(4, b, "meta-llama@8@0@a1b2%3d.c@bfloat16.data");
  EXPECT_EQ(InoOf(Path("/")), kRootIno);
  EXPECT_EQ(InoOf(Path("//a///b/")), 3u);
  EXPECT_EQ(InoOf(Path("/a/b/meta-llama@8@0@a1b2%3d.c@bfloat16.data")), 4u);
  EXPECT_EQ(InoOf(In(3, "meta-llama@8@0@a1b2%3d.c@bfloat16.data")), 4u);
  EXPECT_EQ(InoOf(Ino(3)), 3u);
  EXPECT_EQ(InoOf(Ino(0)), kRootIno);
  // A path wins over a directory and name, which win over an inode.
  rpc::Ref both = In(2, "b");
  both.set_path("/a");
  EXPECT_EQ(InoOf(both), 2u);
}

TEST_F(NamespaceTreeTest, ResolveErrorsSayWhatIsWrong) {
  Inode *a = Dir(2, tree_.root(), "a");
  File(3, a, "f");
  EXPECT_EQ(Error(Path("/a/missing")), ENOENT);
  EXPECT_EQ(Error(Path("/missing/f")), ENOENT);
  EXPECT_EQ(Error(Path("/a/f/under-a-file")), ENOTDIR);
  EXPECT_EQ(Error(Path("relative")), EINVAL);
  EXPECT_EQ(Error(Path("/a/../a")), EINVAL);
  EXPECT_EQ(Error(Path("/" + std::string(kMaxNameLength + 1, 'n'))), ENAMETOOLONG);
  EXPECT_EQ(Error(In(2, "missing")), ENOENT);
  EXPECT_EQ(Error(In(3, "x")), ENOTDIR);
  EXPECT_EQ(Error(In(42, "x")), ESTALE);
  EXPECT_EQ(Error(In(2, "..")), EINVAL);
  EXPECT_EQ(Error(In(2, "a/b")), EINVAL);
  EXPECT_EQ(Error(Ino(42)), ESTALE);
}

TEST_F(NamespaceTreeTest, WalkingNeedsExecOnEveryDirectoryOnTheWay) {
  Inode *locked = Dir(2, tree_.root(), "locked", 0700);  // owned by root
  Inode *open = Dir(3, locked, "open", 0777);
  File(4, open, "f");
  EXPECT_EQ(Error(Path("/locked/open/f"), kAlice), EACCES);
  EXPECT_EQ(Error(In(2, "open"), kAliceViaFuse), EACCES);  // the directory named is searched
  // By inode number: only for root and maru-fuse...
  EXPECT_EQ(Error(In(3, "f"), kAlice), EPERM);
  EXPECT_EQ(Error(Ino(4), kAlice), EPERM);
  // ...and then the way there is checked as a walk would check it: a known
  // (or kernel-cached) number opens nothing a path would not.
  EXPECT_EQ(Error(In(3, "f"), kAliceViaFuse), EACCES);
  EXPECT_EQ(Error(Ino(4), kAliceViaFuse), EACCES);
  EXPECT_EQ(Error(Ino(3), kAliceViaFuse), EACCES);
  EXPECT_EQ(Error(Ino(2), kAliceViaFuse), 0);  // the locked directory itself: no search in it
  EXPECT_EQ(Error(In(3, "f"), kRoot), 0);
  EXPECT_EQ(Error(Ino(4), kRoot), 0);
  EXPECT_EQ(tree_.ResolveParent(In(3, "new"), kAliceViaFuse).status().errnum(), EACCES);
  EXPECT_TRUE(tree_.ResolveParent(In(3, "new"), kRoot).ok());
  EXPECT_EQ(Error(Path("/locked"), kAlice), 0);  // naming the directory is no search in it
  EXPECT_EQ(Error(Path("/locked/open/f"), kRoot), 0);
  Inode *exec_only = Dir(5, tree_.root(), "x", 0711);
  File(6, exec_only, "f");
  EXPECT_EQ(Error(Path("/x/f"), kAlice), 0);
}

TEST_F(NamespaceTreeTest, ResolveParentFindsTheDirectoryAndTheLastName) {
  Inode *a = Dir(2, tree_.root(), "a");
  File(3, a, "f");
  Result<NamespaceTree::ParentAndName> p = tree_.ResolveParent(Path("/a/new"), kRoot);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->dir, a);
  EXPECT_EQ(p->name, "new");
  p = tree_.ResolveParent(In(2, "new"), kRoot);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->dir, a);
  EXPECT_EQ(p->name, "new");
  auto error = [&](const rpc::Ref &ref) {
    Result<NamespaceTree::ParentAndName> r = tree_.ResolveParent(ref, kRoot);
    return r.ok() ? 0 : r.status().errnum();
  };
  EXPECT_EQ(error(Path("/")), EEXIST);
  EXPECT_EQ(error(Path("/missing/new")), ENOENT);
  EXPECT_EQ(error(Path("/a/f/new")), ENOTDIR);
  EXPECT_EQ(error(Ino(2)), EINVAL);
  EXPECT_EQ(error(In(2, ".")), EINVAL);
  EXPECT_EQ(error(In(42, "new")), ESTALE);
  EXPECT_EQ(error(In(3, "new")), ENOTDIR);
}

TEST_F(NamespaceTreeTest, ResolveParentMakesMissingDirectoriesOnlyWhenAsked) {
  uint64_t next_ino = 10;
  std::vector<std::string> made;
  NamespaceTree::MakeDir make = [&](Inode *parent, const std::string &name) -> Result<Inode *> {
    made.push_back(name);
    return Dir(next_ino++, parent, name);
  };
  Result<NamespaceTree::ParentAndName> p = tree_.ResolveParent(Path("/x/y/z/leaf"), kRoot, make);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(made, (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(p->name, "leaf");
  EXPECT_EQ(tree_.PathOf(*p->dir), "/x/y/z");
  // Existing ones are walked, not made again.
  made.clear();
  ASSERT_TRUE(tree_.ResolveParent(Path("/x/y/other/leaf"), kRoot, make).ok());
  EXPECT_EQ(made, (std::vector<std::string>{"other"}));
  // The maker's error is the answer.
  NamespaceTree::MakeDir full = [](Inode *, const std::string &) -> Result<Inode *> {
    return Status::Error(ENOSPC);
  };
  Result<NamespaceTree::ParentAndName> r = tree_.ResolveParent(Path("/q/leaf"), kRoot, full);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().errnum(), ENOSPC);
  // Nothing is made past a directory the caller may not search.
  Dir(50, tree_.root(), "locked", 0700);
  made.clear();
  r = tree_.ResolveParent(Path("/locked/m/leaf"), kAlice, make);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().errnum(), EACCES);
  EXPECT_TRUE(made.empty());
}

TEST_F(NamespaceTreeTest, PathsAndAncestry) {
  Inode *root = tree_.root();
  Inode *a = Dir(2, root, "a");
  Inode *b = Dir(3, a, "b");
  Inode *c = Dir(4, root, "c");
  EXPECT_EQ(tree_.PathOf(*root), "/");
  EXPECT_EQ(tree_.PathOf(*b), "/a/b");
  EXPECT_TRUE(tree_.IsAncestor(*b, *b));
  EXPECT_TRUE(tree_.IsAncestor(*a, *b));
  EXPECT_TRUE(tree_.IsAncestor(*root, *b));
  EXPECT_FALSE(tree_.IsAncestor(*b, *a));
  EXPECT_FALSE(tree_.IsAncestor(*c, *b));
  // An inode cut off from the root has no way up.
  Inode *stray = Add(9, 77, "stray", S_IFDIR | 0755);
  EXPECT_FALSE(tree_.IsAncestor(*root, *stray));
}

TEST_F(NamespaceTreeTest, RemovingWhatForEachFoundEmptiesTheTree) {
  // ForEach must not be used to remove as it goes; the engine collects
  // first, then unlinks and releases.
  Inode *a = Dir(2, tree_.root(), "a");
  for (uint64_t i = 0; i < 100; ++i) File(10 + i, a, "f" + std::to_string(i));
  std::vector<uint64_t> found;
  tree_.ForEach([&](const Inode &inode) {
    if (inode.is_file()) found.push_back(inode.ino);
  });
  ASSERT_EQ(found.size(), 100u);
  for (uint64_t ino : found) {
    tree_.Unlink(tree_.Find(ino));
    ASSERT_NE(tree_.Release(ino), nullptr);
  }
  EXPECT_TRUE(a->children.empty());
  EXPECT_EQ(tree_.size(), 2u);
  size_t seen = 0;
  tree_.ForEach([&](const Inode &) { ++seen; });
  EXPECT_EQ(seen, 2u);
}

// The inode table against std::map: inserts, replacements, removals (which
// shift probed entries back) and finds, through several growths.
TEST(InodeTable, MatchesAMap) {
  std::mt19937_64 rng(3);
  InodeTable table;
  std::map<uint64_t, Inode *> want;
  for (int step = 0; step < 50000; ++step) {
    const uint64_t ino = 1 + rng() % 3000;
    if (rng() % 3) {
      auto inode = std::make_unique<Inode>();
      inode->ino = ino;
      want[ino] = table.Insert(std::move(inode));
    } else {
      std::unique_ptr<Inode> got = table.Take(ino);
      auto it = want.find(ino);
      ASSERT_EQ(got.get(), it == want.end() ? nullptr : it->second);
      if (it != want.end()) want.erase(it);
    }
    ASSERT_EQ(table.size(), want.size());
    if (step % 1000) continue;
    for (uint64_t i = 1; i <= 3000; ++i) {
      auto it = want.find(i);
      ASSERT_EQ(table.Find(i), it == want.end() ? nullptr : it->second) << i;
    }
    size_t seen = 0;
    table.ForEach([&](const Inode &inode) {
      ++seen;
      ASSERT_TRUE(want.count(inode.ino));
    });
    ASSERT_EQ(seen, want.size());
  }
}

// Directory entries (a B-tree) against std::map through adds in and out of
// order, replacements (the key then views the new name) and erases, with
// every lookup a readdir makes: find, upper_bound, forward and reverse.
TEST(DirEntries, MatchesAMap) {
  std::mt19937_64 rng(5);
  DirEntries entries;
  std::map<std::string, uint64_t> want;
  std::deque<std::string> names;  // what the keys view; never moved
  auto name_of = [&](uint64_t n) -> const std::string & {
    char buf[16];
    snprintf(buf, sizeof(buf), "c%05llu", static_cast<unsigned long long>(n));
    return names.emplace_back(buf);
  };
  uint64_t next_in_order = 0;
  for (uint64_t step = 1; step <= 40000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0) {  // in name order, as a load brings them
      const std::string &name = name_of(next_in_order++ % 20000);
      DirEntries::Near near;  // (other changes come between: none is kept)
      ASSERT_EQ(entries.Add(name, step, &near), want.try_emplace(name, step).second);
    } else if (op == 1) {  // anywhere, or over an existing name
      const std::string &name = name_of(rng() % 20000);
      entries.Set(name, step);
      want[name] = step;
      ASSERT_EQ(entries.find(name)->first.data(), name.data());
    } else {
      const std::string &name = name_of(rng() % 20000);
      auto it = entries.find(name);
      ASSERT_EQ(it == entries.end(), !want.count(name));
      if (it != entries.end() && op == 2) {
        entries.erase(it);
        want.erase(name);
      }
    }
    ASSERT_EQ(entries.size(), want.size());
    if (step % 4000) continue;
    ASSERT_TRUE(std::equal(
        entries.begin(), entries.end(), want.begin(), want.end(),
        [](const auto &a, const auto &b) { return a.first == b.first && a.second == b.second; }));
    ASSERT_TRUE(std::equal(entries.rbegin(), entries.rend(), want.rbegin(), want.rend(),
                           [](const auto &a, const auto &b) { return a.first == b.first; }));
    for (int i = 0; i < 200; ++i) {
      const std::string after = name_of(rng() % 20000);
      auto got = entries.upper_bound(after);
      auto expect = want.upper_bound(after);
      ASSERT_EQ(got == entries.end(), expect == want.end()) << after;
      if (got != entries.end()) {
        ASSERT_EQ(got->first, expect->first) << after;
      }
    }
  }
  while (!entries.empty()) entries.erase(entries.begin());
  EXPECT_EQ(entries.size(), 0u);
}

}  // namespace
// Inodes come from slot arenas; threads take slots from runs of their own.
TEST(SlotArena, ThreadsTakeDistinctSlotsAndReleasedOnesComeBack) {
  SlotArena<64, 64> arena;
  constexpr int kThreads = 4, kEach = 10000;
  std::vector<std::vector<void *>> taken(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        void *p = arena.Allocate();
        memset(p, t + 1, 64);
        taken[t].push_back(p);
      }
    });
  for (std::thread &t : threads) t.join();
  std::set<void *> all;
  for (int t = 0; t < kThreads; ++t)
    for (void *p : taken[t]) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
      EXPECT_EQ(*static_cast<unsigned char *>(p), t + 1) << "a slot written by two threads";
      all.insert(p);
    }
  EXPECT_EQ(all.size(), size_t{kThreads * kEach});
  // A released slot is the next one taken on this thread, when its run is
  // used up; one of its own run first.
  arena.Release(taken[0][5]);
  std::set<void *> again;
  for (int i = 0; i < 65; ++i) again.insert(arena.Allocate());
  EXPECT_EQ(again.count(taken[0][5]), 1u);
}

TEST(SlotArena, WhatAThreadLeavesOfItsRunComesBackWhenItEnds) {
  // A thread that takes one slot leaves 63 of its run: were they lost,
  // a thousand such threads would spread over 64000 slots.
  SlotArena<64, 64> arena;
  std::vector<uintptr_t> slots;
  for (int i = 0; i < 1000; ++i)
    std::thread([&] { slots.push_back(reinterpret_cast<uintptr_t>(arena.Allocate())); }).join();
  std::sort(slots.begin(), slots.end());
  EXPECT_EQ(std::unique(slots.begin(), slots.end()), slots.end());
  EXPECT_LT(slots.back() - slots.front(), uintptr_t{2 * 1000 * 64});
}

}  // namespace maru
