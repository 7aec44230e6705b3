// LeaderGate: whether this maru-server may answer calls now, in one place.
//
// A server that does not lead refuses every call with FAILED_PRECONDITION
// and a text naming the leader when it knows it, so that a client moves on
// to the next server of its list (client/meta_client.h). MetaService checks
// it before each call (one atomic load); the election flips it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "util/mutex.h"

namespace maru {

class LeaderGate {
 public:
  // Not leading, leader unknown, until Lead().
  LeaderGate() = default;

  void Lead(uint64_t epoch) EXCLUDES(mu_);
  // Stops answering; `leader` (its endpoint) may be empty when unknown.
  void Follow(const std::string &leader) EXCLUDES(mu_);
  bool leading() const { return leading_.load(std::memory_order_acquire); }
  // The epoch this server leads with (0 when it does not lead).
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // What a refused call is told.
  std::string Refusal() const EXCLUDES(mu_);

 private:
  std::atomic<bool> leading_{false};
  std::atomic<uint64_t> epoch_{0};
  mutable Mutex mu_;
  std::string leader_ GUARDED_BY(mu_);
};

}  // namespace maru
