#include "meta/shm_index.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "util/log.h"

namespace maru {
namespace {

Status Errno(const std::string &what) {
  const int err = errno;
  return Status::Error(err, what + ": " + strerror(err));
}

uint64_t Random64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != sizeof(v))
    v = static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15;
  return v;
}

uint64_t EntriesFor(uint64_t units) {
  uint64_t want = std::clamp<uint64_t>(units * 2, 4096, 4u << 20), n = 1;
  while (n < want) n <<= 1;
  return n;
}

// Marks an index left by an earlier server dead, so that clients still
// mapping it stop trusting it.
void MarkOldDead(const std::string &path) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  void *p = mmap(nullptr, index::kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return;
  auto *h = static_cast<index::Header *>(p);
  if (h->magic == index::kMagic) h->state.store(index::kDead);
  munmap(p, index::kPage);
}

// Every directory above `inode` lets anyone search it.
bool PathOpen(const NamespaceTree &tree, const Inode &inode) {
  for (const Inode *dir = tree.Find(inode.parent); dir; dir = tree.Find(dir->parent)) {
    if (!(dir->mode & S_IXOTH)) return false;
    if (dir->ino == kRootIno) break;
  }
  return true;
}

// Makes every page of the mapping: entering a million chunks touches every
// page anyway, and one fault a page costs more than making them all at
// once. A piece at a time, because making pages holds the process's mapping
// lock: a start's other threads, which grow the heap meanwhile, would wait
// for all 2 GiB of it (MAP_POPULATE) rather than for a piece. Where the
// kernel cannot (before 5.14), pages are made as they are touched.
void Populate(void *base, size_t bytes) {
  constexpr size_t kPiece = 32 << 20;
  for (size_t at = 0; at < bytes; at += kPiece)
    if (madvise(static_cast<char *>(base) + at, std::min(kPiece, bytes - at),
                MADV_POPULATE_WRITE) != 0)
      return;
}

}  // namespace

std::string DefaultIndexPath(const std::string &pool_path, const std::string &pool_uuid) {
  // Beside a pool file, unless on hugetlbfs, whose files are whole huge
  // pages and take no write(): there, like a device's, in /dev/shm.
  struct stat st;
  struct statfs fs;
  if (stat(pool_path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      !(statfs(pool_path.c_str(), &fs) == 0 && static_cast<uint64_t>(fs.f_type) == HUGETLBFS_MAGIC))
    return pool_path + ".index";
  std::string hex;
  char buf[3];
  for (unsigned char ch : pool_uuid) {
    snprintf(buf, sizeof(buf), "%02x", ch);
    hex += buf;
  }
  return "/dev/shm/maru-" + hex + ".index";
}

Result<std::unique_ptr<ShmIndex>> ShmIndex::Create(const IndexOptions &options,
                                                   const std::string &pool_path,
                                                   uint64_t pool_units, const NamespaceTree &tree) {
  struct stat pool;
  if (stat(pool_path.c_str(), &pool) != 0) return Errno("stat " + pool_path);
  const uint64_t entries = options.entries ? options.entries : EntriesFor(pool_units);
  if (entries & (entries - 1)) return Status::Error(EINVAL, "index entries: a power of two");
  const uint32_t regions = std::max<uint32_t>(options.regions, 1);
  const size_t bytes = index::FileBytes(entries, regions);
  MarkOldDead(options.path);
  const std::string tmp = options.path + ".new";
  unlink(tmp.c_str());
  int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno("create " + tmp);
  // The pool's owner (when this server may give it), its group and at most
  // its bits: whoever may map the pool may read the index, and write lease
  // slots if it may write the pool.
  mode_t mode = pool.st_mode & 0660;
  if (fchown(fd, pool.st_uid, pool.st_gid) != 0 &&
      fchown(fd, static_cast<uid_t>(-1), pool.st_gid) != 0) {
    struct stat self;
    if (fstat(fd, &self) != 0 || self.st_gid != pool.st_gid) mode &= 0600;
  }
  Status s = Status::Ok();
  void *base = MAP_FAILED;
  struct stat made {};
  if (fchmod(fd, mode) != 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fstat(fd, &made) != 0)
    s = Errno("size " + tmp);
  else if ((base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    s = Errno("map " + tmp);
  close(fd);
  if (s.ok()) Populate(base, bytes);
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  auto *h = static_cast<index::Header *>(base);
  h->magic = index::kMagic;
  h->version = index::kVersion;
  h->state.store(index::kStarting);
  h->instance = Random64();
  h->key[0] = Random64();
  h->key[1] = Random64();
  h->entries = entries;
  h->entries_offset = index::kPage;
  h->regions = regions;
  h->slots_per_region = index::kSlotsPerRegion;
  h->regions_offset = index::kPage + entries * sizeof(index::Entry);
  if (rename(tmp.c_str(), options.path.c_str()) != 0) {
    Status err = Errno("rename to " + options.path);
    munmap(base, bytes);
    unlink(tmp.c_str());
    return err;
  }
  auto index = std::unique_ptr<ShmIndex>(new ShmIndex(options.path, base, bytes, tree));
  index->file_uid_ = made.st_uid;
  index->file_gid_ = made.st_gid;
  index->file_mode_ = made.st_mode & 07777;
  return index;
}

bool ShmIndex::MayOpen(const Caller &c) const {
  // What open(O_RDWR) of the file would say (the client maps it so).
  if (c.is_root()) return true;
  uint32_t bits = file_mode_;
  if (c.uid == file_uid_)
    bits >>= 6;
  else if (c.InGroup(file_gid_))
    bits >>= 3;
  return (bits & 06) == 06;
}

ShmIndex::ShmIndex(std::string path, void *base, size_t bytes, const NamespaceTree &tree)
    : path_(std::move(path)),
      base_(base),
      bytes_(bytes),
      header_(static_cast<index::Header *>(base)),
      entries_(index::Entries(base, *header_)),
      tree_(tree),
      slots_(base, header_) {}

ShmIndex::~ShmIndex() {
  header_->state.store(index::kDead);
  // Only our own file: a newer server may have replaced it already.
  int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    void *p = mmap(nullptr, index::kPage, PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      if (static_cast<index::Header *>(p)->instance == header_->instance) unlink(path_.c_str());
      munmap(p, index::kPage);
    }
    close(fd);
  }
  munmap(base_, bytes_);
}

void ShmIndex::PublishAll(const std::vector<Inode *> &order) {
  by_gen_.reserve(order.size());
  const Inode *dir = nullptr;  // the last file's: siblings mostly come together
  std::string dir_path, path;
  bool dir_open = false;
  // Entered a batch at a time, each batch's entries fetched from memory
  // together first: entries are 128 random bytes each in a table far larger
  // than the caches, one miss each if taken one by one.
  struct Pending {
    const Inode *file;
    uint64_t key[2];
    bool path_open;
  };
  Pending batch[16];
  size_t pending = 0;
  // Entered up to 7/8 of the entries; the rest are overflow (clients ask
  // the server for them). Past that load an insert probes its 32 entries
  // mostly in vain: ten million chunks into the default 4Mi entries took
  // 10 s of a start that way.
  const uint64_t room = header_->entries / 8 * 7;
  auto flush = [&] {
    const uint64_t mask = header_->entries - 1;
    for (size_t i = 0; i < pending; ++i) {
      const char *e = reinterpret_cast<const char *>(&entry(batch[i].key[0] & mask));
      __builtin_prefetch(e);
      __builtin_prefetch(e + 64);
    }
    for (size_t i = 0; i < pending; ++i) Enter(*batch[i].file, batch[i].key, batch[i].path_open);
    pending = 0;
  };
  ForEachInode(order, [&](const Inode *inode) {
    if (inode->is_dir()) {
      dirs_[inode->ino] = DirState{inode->parent, inode->mode, inode->name};
      return;
    }
    if (!inode->is_file() || !inode->current) return;
    if (!dir || dir->ino != inode->parent) {
      dir = tree_.Find(inode->parent);
      if (!dir) return;  // not in the tree: nothing to enter
      dir_path = tree_.PathOf(*dir);
      if (dir_path != "/") dir_path += '/';
      dir_open = (dir->mode & S_IXOTH) && PathOpen(tree_, *dir);
    }
    if (by_gen_.size() + pending >= room) return (void)header_->overflow.fetch_add(1);
    path.assign(dir_path).append(inode->name);
    Pending &p = batch[pending++];
    p.file = inode;
    index::PathKey(header_->key, path, p.key);
    p.path_open = dir_open;
    if (pending == std::size(batch)) flush();
  });
  flush();
  if (order.size() != tree_.size())  // what `order` left out
    tree_.ForEach([&](const Inode &inode) {
      if (inode.is_dir())
        dirs_.try_emplace(inode.ino, DirState{inode.parent, inode.mode, inode.name});
      else if (inode.is_file() && inode.current && !by_gen_.contains(inode.current->gen))
        by_gen_.size() < room ? Publish(inode) : void(header_->overflow.fetch_add(1));
    });
  header_->state.store(index::kLive, std::memory_order_seq_cst);
}

index::EntryData ShmIndex::Describe(const Inode &file, const uint64_t key[2],
                                    bool path_open) const {
  const Version &v = *file.current;
  index::EntryData d{};
  d.key[0] = key[0];
  d.key[1] = key[1];
  d.ino = file.ino;
  d.gen = v.gen;
  d.size = v.size;
  d.uid = file.uid;
  d.gid = file.gid;
  d.mode = file.mode;
  d.flags =
      index::kUsed | (path_open ? index::kPathOpen : 0) | (v.parts > 1 ? index::kManyParts : 0);
  d.checksum_type = static_cast<uint32_t>(v.checksum_type);
  d.checksum = v.checksum;
  d.extent_count = static_cast<uint32_t>(v.extents.size());
  if (v.extents.size() > index::kInlineExtents) {
    d.flags |= index::kNoExtents;
  } else {
    for (size_t i = 0; i < v.extents.size(); ++i)
      d.extents[i] = {v.extents[i].device, v.extents[i].offset, v.extents[i].length};
  }
  return d;
}

void ShmIndex::Changed(const Inode &inode) {
  if (!inode.is_dir()) return Publish(inode);
  DirState now{inode.parent, inode.mode, inode.name};
  auto [it, added] = dirs_.try_emplace(inode.ino, now);
  if (added) return;  // new: nothing under it yet
  const bool moved = it->second.parent != now.parent || it->second.name != now.name;
  const bool searchable = (it->second.mode & S_IXOTH) != (now.mode & S_IXOTH);
  it->second = std::move(now);
  if (moved || searchable) RefreshTree(inode);
}

void ShmIndex::RefreshTree(const Inode &dir) {
  for (const auto &[name, ino] : dir.children)
    if (const Inode *child = tree_.Find(ino)) {
      if (child->is_dir())
        RefreshTree(*child);
      else
        Publish(*child);
    }
}

void ShmIndex::Remove(uint64_t pos) {
  index::EntryData gone{};
  gone.flags = index::kTombstone;
  index::WriteEntry(&entry(pos), gone);
}

void ShmIndex::Publish(const Inode &file) {
  if (!file.is_file() || !file.current) return;
  uint64_t key[2];
  index::PathKey(header_->key, tree_.PathOf(file), key);
  Enter(file, key, PathOpen(tree_, file));
}

void ShmIndex::Enter(const Inode &file, const uint64_t key[2], bool path_open) {
  const index::EntryData d = Describe(file, key, path_open);
  // The version's place, if it has one. (A start enters millions of
  // versions none of which has one: one search of a flat table each.)
  if (const uint64_t *at = by_gen_.find(d.gen)) {
    const uint64_t pos = *at;
    index::EntryData old{};
    uint64_t seq;
    index::ReadEntry(entry(pos), &old, &seq);  // the only writer: always stable
    if (old.key[0] == key[0] && old.key[1] == key[1]) return index::WriteEntry(&entry(pos), d);
    Remove(pos);  // renamed: the old path goes first
    by_gen_.erase(d.gen);
  }
  const uint64_t mask = header_->entries - 1;
  uint64_t free_pos = UINT64_MAX;
  for (uint64_t i = 0; i < index::kMaxProbe; ++i) {
    const uint64_t pos = (key[0] + i) & mask;
    index::EntryData e{};
    uint64_t seq;
    index::ReadEntry(entry(pos), &e, &seq);
    if (e.flags & index::kUsed) {
      if (e.key[0] != key[0] || e.key[1] != key[1]) continue;
      if (e.gen != d.gen) {  // the same path under another version: replaced
        by_gen_.erase(e.gen);
        draining_.insert(e.gen);
      }
      free_pos = pos;
      break;
    }
    if (free_pos == UINT64_MAX) free_pos = pos;
    if (!(e.flags & index::kTombstone)) break;  // empty: the key is nowhere further
  }
  if (free_pos == UINT64_MAX) {
    header_->overflow.fetch_add(1);
    return;
  }
  index::WriteEntry(&entry(free_pos), d);
  *by_gen_.try_emplace(d.gen, free_pos).first = free_pos;
}

void ShmIndex::Retiring(uint64_t gen) {
  const uint64_t *at = by_gen_.find(gen);
  if (!at) return;
  const uint64_t pos = *at;
  // Not a tombstone yet: a reader would take that for "no such chunk"
  // while a rewrite is about to put the new version in its place.
  index::EntryData e{};
  uint64_t seq;
  index::ReadEntry(entry(pos), &e, &seq);
  e.flags |= index::kChanging;
  index::WriteEntry(&entry(pos), e);
  changing_.push_back(pos);
  by_gen_.erase(gen);
  draining_.insert(gen);
}

void ShmIndex::Settle() {
  for (uint64_t pos : changing_) {
    index::EntryData e{};
    uint64_t seq;
    index::ReadEntry(entry(pos), &e, &seq);
    if (e.flags & index::kChanging) Remove(pos);
  }
  changing_.clear();
}

bool ShmIndex::Held(uint64_t gen) {
  const bool indexed = by_gen_.contains(gen);
  if (!indexed && !draining_.count(gen)) return false;
  if (slots_.Holds(gen)) return true;
  if (!indexed) draining_.erase(gen);  // out of the index and of every slot: for good
  return false;
}

}  // namespace maru
