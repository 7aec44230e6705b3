// A C++ wrapper over maru_direct.h: handles that release themselves.
// Header-only; errors stay values (negative errnos), as in the C API.
//
//   maru_direct::Client client;
//   if (int rc = client.Connect("unix:///run/maru/maru.sock")) ...;
//   maru_direct::Chunk c;
//   if (int rc = client.Create("/llama/abc", size, &c)) ...;
//   memcpy(c.data(), kv, size);
//   c.Seal();                       // c now reads like an opened chunk
//   // ~Chunk releases the lease, ~Client disconnects
#ifndef MARU_DIRECT_HPP
#define MARU_DIRECT_HPP

#include <string>
#include <utility>
#include <vector>

#include "maru_direct.h"

namespace maru_direct {

class Chunk {
 public:
  Chunk() = default;
  explicit Chunk(maru_chunk_t *c) : c_(c) {}
  ~Chunk() { Release(); }
  Chunk(Chunk &&other) noexcept : c_(std::exchange(other.c_, nullptr)) {}
  Chunk &operator=(Chunk &&other) noexcept {
    if (this != &other) {
      Release();
      c_ = std::exchange(other.c_, nullptr);
    }
    return *this;
  }
  Chunk(const Chunk &) = delete;
  Chunk &operator=(const Chunk &) = delete;

  explicit operator bool() const { return c_ != nullptr; }
  void *data() { return maru_chunk_data(c_); }
  uint64_t size() const { return maru_chunk_size(c_); }
  int Seal() { return maru_seal(c_); }
  // An allocation (Client::Alloc) named and sealed in one step.
  int Publish(const std::string &path, const char *parent = nullptr) {
    return maru_publish(c_, path.c_str(), parent);
  }
  int ReadInto(void *dst, uint64_t off, uint64_t len) { return maru_read_into(c_, dst, off, len); }
  // maru_write_from(): large copies stream into the pool past the caches.
  int WriteFrom(const void *src, uint64_t off, uint64_t len) {
    return maru_write_from(c_, src, off, len);
  }
  int Verify() { return maru_verify(c_); }
  // maru_lease_check(): 0 if the bytes read so far were surely the chunk's.
  int LeaseCheck() { return maru_lease_check(c_); }
  // Drops the lease (or abandons an unsealed chunk) now.
  int Release() { return c_ ? maru_release(std::exchange(c_, nullptr)) : 0; }
  maru_chunk_t *get() const { return c_; }

 private:
  maru_chunk_t *c_ = nullptr;
};

class Client {
 public:
  Client() = default;
  ~Client() { Disconnect(); }
  Client(Client &&other) noexcept : m_(std::exchange(other.m_, nullptr)) {}
  Client &operator=(Client &&other) noexcept {
    if (this != &other) {
      Disconnect();
      m_ = std::exchange(other.m_, nullptr);
    }
    return *this;
  }
  Client(const Client &) = delete;
  Client &operator=(const Client &) = delete;

  // nullptr target: $MARU_SERVER, else the default socket.
  int Connect(const char *target = nullptr, const maru_connect_opts_t *opts = nullptr) {
    Disconnect();
    return maru_connect_ex(target, opts, &m_);
  }
  void Disconnect() {
    if (m_) maru_disconnect(std::exchange(m_, nullptr));
  }

  int Create(const std::string &path, uint64_t size, Chunk *out,
             const maru_create_opts_t *opts = nullptr) {
    maru_chunk_t *c = nullptr;
    int rc = maru_create_ex(m_, path.c_str(), size, opts, &c);
    if (rc == 0) *out = Chunk(c);
    return rc;
  }
  // Space under no name; Chunk::Publish() names it.
  int Alloc(uint64_t size, Chunk *out, const maru_create_opts_t *opts = nullptr) {
    maru_chunk_t *c = nullptr;
    int rc = maru_alloc(m_, size, opts, &c);
    if (rc == 0) *out = Chunk(c);
    return rc;
  }
  int Open(const std::string &path, Chunk *out) {
    maru_chunk_t *c = nullptr;
    int rc = maru_open(m_, path.c_str(), &c);
    if (rc == 0) *out = Chunk(c);
    return rc;
  }
  // The longest existing prefix of `paths`, in one round trip: `hits`
  // receives one chunk per path found, in order.
  int LookupPrefix(const std::vector<std::string> &paths, std::vector<Chunk> *hits) {
    std::vector<const char *> p;
    for (const std::string &s : paths) p.push_back(s.c_str());
    std::vector<maru_chunk_t *> out(paths.size());
    size_t n = 0;
    int rc = maru_lookup_prefix(m_, p.data(), p.size(), out.data(), &n);
    hits->clear();
    for (size_t i = 0; i < n; ++i) hits->emplace_back(out[i]);
    return rc;
  }
  // How many of `paths` from the start exist, without leases.
  int CountPrefix(const std::vector<std::string> &paths, size_t *count) {
    std::vector<const char *> p;
    for (const std::string &s : paths) p.push_back(s.c_str());
    return maru_count_prefix(m_, p.data(), p.size(), count);
  }
  int Unlink(const std::string &path) { return maru_unlink(m_, path.c_str()); }
  int Pin(const std::string &path) { return maru_pin(m_, path.c_str()); }
  int Unpin(const std::string &path) { return maru_unpin(m_, path.c_str()); }
  maru_t *get() const { return m_; }

 private:
  maru_t *m_ = nullptr;
};

}  // namespace maru_direct

#endif  // MARU_DIRECT_HPP
