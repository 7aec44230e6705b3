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

// Marks an index left by an earlier server dead, so that clients still
// mapping it stop trusting it. Only a regular file this server's user
// owns: anything else at the name was put there by someone else, and is
// neither written nor trusted (it is replaced, below).
void MarkOldDead(const std::string &path, bool flush) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      static_cast<uint64_t>(st.st_size) < index::kPage) {
    if (fstat(fd, &st) == 0)
      LOG_ERROR("%s belongs to uid %u, not to this server: left as it is, and replaced",
                path.c_str(), st.st_uid);
    close(fd);
    return;
  }
  void *p = mmap(nullptr, index::kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return;
  auto *h = static_cast<index::Header *>(p);
  if (h->magic == index::kMagic) {
    h->state.store(index::kDead);
    index::Written(&h->state, sizeof(h->state), flush);
  }
  munmap(p, index::kPage);
}

std::string DirOf(const std::string &path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string RandomSuffix() {
  char hex[17];
  snprintf(hex, sizeof(hex), "%016lx", static_cast<unsigned long>(Random64()));
  return hex;
}

// A new file in `dir` that no one else can have opened or named: unnamed
// (O_TMPFILE) where the filesystem allows, else under a random name.
// Returns its descriptor and sets `named` to its name, if it has one.
int MakeFile(const std::string &dir, const std::string &prefix, std::string *named) {
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR)) return fd;
  for (int tries = 0; tries < 8; ++tries) {
    *named = prefix + RandomSuffix();
    fd = open(named->c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

// Gives an unnamed file `fd` the name `name`; false if taken or impossible.
bool LinkUnnamed(int fd, const std::string &name) {
  if (linkat(fd, "", AT_FDCWD, name.c_str(), AT_EMPTY_PATH) == 0) return true;
  // Without CAP_DAC_READ_SEARCH: through /proc, which links the same file.
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  return linkat(AT_FDCWD, self.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0;
}

// Puts the made file at `path`: linked in under a random name (no one can
// have taken it), then renamed over `path` (atomically replacing a
// predecessor's index). Where `path` is taken by something this server
// may not replace (a directory someone made there, another user's file),
// the file stays under its random name, which clients are told, and the
// name is reported loudly: the index keeps working.
Result<std::string> PutInPlace(int fd, const std::string &path, std::string named) {
  if (named.empty()) {
    for (int tries = 0; tries < 8 && named.empty(); ++tries)
      if (const std::string name = path + ".new." + RandomSuffix(); LinkUnnamed(fd, name))
        named = name;
    if (named.empty()) return Errno("link the index into " + DirOf(path));
  }
  if (rename(named.c_str(), path.c_str()) == 0) return path;
  const int err = errno;
  struct stat st {};
  lstat(path.c_str(), &st);
  LOG_ERROR(
      "cannot put the shared-memory index at %s (%s; it is a %s of uid %u): serving it at %s; "
      "remove what holds the name",
      path.c_str(), strerror(err), S_ISDIR(st.st_mode) ? "directory" : "file", st.st_uid,
      named.c_str());
  return named;
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
void PopulatePages(void *base, size_t bytes) {
  constexpr size_t kPiece = 32 << 20;
  for (size_t at = 0; at < bytes; at += kPiece)
    if (madvise(static_cast<char *>(base) + at, std::min(kPiece, bytes - at),
                MADV_POPULATE_WRITE) != 0)
      return;
}

// Writes the header clients read (the server never reads it back). The
// state stays kStarting until PublishAll.
void WriteHeader(void *base, const index::Layout &layout, uint64_t instance,
                 const uint64_t key[2]) {
  auto *h = static_cast<index::Header *>(base);
  h->magic = index::kMagic;
  h->version = index::kVersion;
  h->state.store(index::kStarting);
  h->instance = instance;
  h->key[0] = key[0];
  h->key[1] = key[1];
  h->entries = layout.entries;
  h->entries_offset = layout.entries_offset();
  h->regions = layout.regions;
  h->slots_per_region = layout.slots_per_region;
  h->regions_offset = layout.regions_offset();
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
  index::Layout layout;
  layout.entries = options.entries ? options.entries : index::DefaultEntries(pool_units);
  if (layout.entries & (layout.entries - 1))
    return Status::Error(EINVAL, "index entries: a power of two");
  layout.regions = std::max<uint32_t>(options.regions, 1);
  layout.flush = options.flush;
  return options.pool_bytes ? CreateInPool(options, pool_path, layout, tree)
                            : CreateFile(options, pool_path, layout, tree);
}

Result<std::unique_ptr<ShmIndex>> ShmIndex::CreateInPool(const IndexOptions &options,
                                                         const std::string &pool_path,
                                                         const index::Layout &layout,
                                                         const NamespaceTree &tree) {
  // Checked against the server's own numbers (read from the superblock at
  // start, CRC-checked), never against what the region holds.
  if (layout.bytes() > options.pool_bytes)
    return Status::Error(
        ENOSPC, "--index-entries " + std::to_string(layout.entries) + " and --index-sessions " +
                    std::to_string(layout.regions) + " need " + std::to_string(layout.bytes()) +
                    " bytes of index; the pool's index region has " +
                    std::to_string(options.pool_bytes) +
                    " (lower them, or make the pool with a larger maructl mkpool --index-size)");
  PoolDevice::OpenOptions open;
  open.writable = true;
  Result<std::unique_ptr<PoolDevice>> pool = PoolDevice::Open(pool_path, open);
  if (!pool.ok()) return pool.status();
  PoolDevice &d = **pool;
  if (options.pool_offset < kSuperblockBytes || options.pool_offset > d.mapped_bytes() ||
      options.pool_bytes > d.mapped_bytes() - options.pool_offset)
    return Status::Error(EINVAL, "the pool's index region lies outside its mapping");
  struct stat st;
  if (fstat(d.fd(), &st) != 0) return Errno("stat " + pool_path);
  uint8_t *base = d.base() + options.pool_offset;
  // Clients of a predecessor let go first (the state, then a new instance:
  // IndexReader::Live checks both); then every byte a predecessor or a
  // client left goes, so that the region starts as a new file would.
  auto *h = reinterpret_cast<index::Header *>(base);
  h->state.store(index::kDead);
  index::Written(&h->state, sizeof(h->state), layout.flush);
  memset(base + index::kPage, 0, options.pool_bytes - index::kPage);
  const uint64_t instance = Random64();
  const uint64_t key[2] = {Random64(), Random64()};
  WriteHeader(base, layout, instance, key);
  memset(reinterpret_cast<char *>(h + 1), 0, index::kPage - sizeof(*h));
  index::Written(base, options.pool_bytes, layout.flush);
  auto made = std::unique_ptr<ShmIndex>(new ShmIndex("", base, layout, instance, key, tree));
  made->pool_ = std::move(*pool);
  // Whoever may map the pool read-write may use the index.
  made->SetAccess(options, st, 0666);
  return made;
}

Result<std::unique_ptr<ShmIndex>> ShmIndex::CreateFile(const IndexOptions &options,
                                                       const std::string &pool_path,
                                                       const index::Layout &layout,
                                                       const NamespaceTree &tree) {
  struct stat pool;
  if (stat(pool_path.c_str(), &pool) != 0) return Errno("stat " + pool_path);
  const size_t bytes = layout.bytes();
  MarkOldDead(options.path, options.flush);
  std::string named;
  int fd = MakeFile(DirOf(options.path), options.path + ".new.", &named);
  if (fd < 0) return Errno("create the index in " + DirOf(options.path));
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
    s = Errno("size the index");
  else if ((base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    s = Errno("map the index");
  if (s.ok()) PopulatePages(base, bytes);
  if (!s.ok()) {
    close(fd);
    if (!named.empty()) unlink(named.c_str());
    return s;
  }
  const uint64_t instance = Random64();
  const uint64_t key[2] = {Random64(), Random64()};
  WriteHeader(base, layout, instance, key);
  // In memory before a client on another host can find the file.
  index::Written(base, bytes, layout.flush);
  // Named only now: a client that opens it finds a complete header.
  Result<std::string> where = PutInPlace(fd, options.path, named);
  close(fd);
  if (!where.ok()) {
    munmap(base, bytes);
    if (!named.empty()) unlink(named.c_str());
    return where.status();
  }
  auto index = std::unique_ptr<ShmIndex>(new ShmIndex(*where, base, layout, instance, key, tree));
  index->SetAccess(options, made, 07777);
  return index;
}

void ShmIndex::SetAccess(const IndexOptions &options, const struct stat &st, uint32_t bits) {
  set_regions_per_uid(options.regions_per_uid ? options.regions_per_uid
                                              : std::max<uint32_t>(layout_.regions / 4, 1));
  file_uid_ = st.st_uid;
  file_gid_ = st.st_gid;
  file_mode_ = st.st_mode & bits;
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

ShmIndex::ShmIndex(std::string path, void *base, const index::Layout &layout, uint64_t instance,
                   const uint64_t key[2], const NamespaceTree &tree)
    : path_(std::move(path)),
      base_(base),
      layout_(layout),
      instance_(instance),
      key_{key[0], key[1]},
      header_(static_cast<index::Header *>(base)),
      entries_(index::Entries(base, layout)),
      tree_(tree),
      slots_(base, layout) {}

ShmIndex::~ShmIndex() {
  header_->state.store(index::kDead);
  index::Written(&header_->state, sizeof(header_->state), layout_.flush);
  if (pool_) return;  // the region stays, dead, until the next server empties it
  // Only our own file: a newer server may have replaced it already.
  int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    void *p = mmap(nullptr, index::kPage, PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      if (static_cast<index::Header *>(p)->instance == instance_) unlink(path_.c_str());
      munmap(p, index::kPage);
    }
    close(fd);
  }
  munmap(base_, layout_.bytes());
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
  const uint64_t room = layout_.entries / 8 * 7;
  auto flush = [&] {
    const uint64_t mask = layout_.entries - 1;
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
    if (by_gen_.size() + pending >= room) return Overflowed();
    path.assign(dir_path).append(inode->name);
    Pending &p = batch[pending++];
    p.file = inode;
    index::PathKey(key_, path, p.key);
    p.path_open = dir_open;
    if (pending == std::size(batch)) flush();
  });
  flush();
  if (order.size() != tree_.size())  // what `order` left out
    tree_.ForEach([&](const Inode &inode) {
      if (inode.is_dir())
        dirs_.try_emplace(inode.ino, DirState{inode.parent, inode.mode, inode.name});
      else if (inode.is_file() && inode.current && !by_gen_.contains(inode.current->gen))
        by_gen_.size() < room ? Publish(inode) : Overflowed();
    });
  header_->state.store(index::kLive, std::memory_order_seq_cst);
  index::Written(&header_->state, sizeof(header_->state), layout_.flush);
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

void ShmIndex::RefreshTree(const Inode &top) {
  // On a stack of its own, not the thread's: the depth is the users' to shape.
  std::vector<const Inode *> dirs{&top};
  while (!dirs.empty()) {
    const Inode *dir = dirs.back();
    dirs.pop_back();
    for (const auto &[name, ino] : dir->children)
      if (const Inode *child = tree_.Find(ino)) {
        if (child->is_dir())
          dirs.push_back(child);
        else
          Publish(*child);
      }
  }
}

void ShmIndex::Remove(uint64_t pos) {
  index::EntryData gone{};
  gone.flags = index::kTombstone;
  index::WriteEntry(&entry(pos), gone, layout_.flush);
}

void ShmIndex::Publish(const Inode &file) {
  if (!file.is_file() || !file.current) return;
  uint64_t key[2];
  index::PathKey(key_, tree_.PathOf(file), key);
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
    index::ReadEntry(entry(pos), &old, &seq);
    if (old.key[0] == key[0] && old.key[1] == key[1])
      return index::WriteEntry(&entry(pos), d, layout_.flush);
    Remove(pos);  // renamed: the old path goes first
    by_gen_.erase(d.gen);
  }
  // What the entries say is only a hint (the pool's group may write them):
  // an entry counts as another version's only where that version's place,
  // by the server's own table, is this very entry.
  const uint64_t mask = layout_.entries - 1;
  uint64_t free_pos = UINT64_MAX;
  for (uint64_t i = 0; i < index::kMaxProbe; ++i) {
    const uint64_t pos = (key[0] + i) & mask;
    index::EntryData e{};
    uint64_t seq;
    index::ReadEntry(entry(pos), &e, &seq);
    if (e.flags & index::kUsed) {
      if (e.key[0] != key[0] || e.key[1] != key[1]) continue;
      if (e.gen != d.gen && Owns(pos, e.gen)) {  // the same path under another version: replaced
        by_gen_.erase(e.gen);
        draining_.insert(e.gen);
      }
      free_pos = pos;
      break;
    }
    if (free_pos == UINT64_MAX) free_pos = pos;
    if (!(e.flags & index::kTombstone)) break;  // empty: the key is nowhere further
  }
  if (free_pos == UINT64_MAX) return Overflowed();
  index::WriteEntry(&entry(free_pos), d, layout_.flush);
  *by_gen_.try_emplace(d.gen, free_pos).first = free_pos;
}

bool ShmIndex::Owns(uint64_t pos, uint64_t gen) const {
  const uint64_t *at = by_gen_.find(gen);
  return at && *at == pos;
}

void ShmIndex::Overflowed() {
  header_->overflow.store(++overflow_, std::memory_order_release);
  index::Written(&header_->overflow, sizeof(header_->overflow), layout_.flush);
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
  index::WriteEntry(&entry(pos), e, layout_.flush);
  changing_.push_back(pos);
  by_gen_.erase(gen);
  draining_.insert(gen);
}

void ShmIndex::Settle() {
  // An entry a rewrite gave its new version stays; by the server's own
  // table, not by the entry's flags, which the pool's group may clear.
  for (uint64_t pos : changing_) {
    index::EntryData e{};
    uint64_t seq;
    index::ReadEntry(entry(pos), &e, &seq);
    if (!(e.flags & index::kUsed) || !Owns(pos, e.gen)) Remove(pos);
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
