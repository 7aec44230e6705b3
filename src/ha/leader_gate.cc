#include "ha/leader_gate.h"

namespace maru {

void LeaderGate::Lead(uint64_t epoch) {
  MutexLock l(&mu_);
  leader_.clear();
  epoch_.store(epoch, std::memory_order_release);
  leading_.store(true, std::memory_order_release);
}

void LeaderGate::Follow(const std::string &leader) {
  leading_.store(false, std::memory_order_release);
  epoch_.store(0, std::memory_order_release);
  MutexLock l(&mu_);
  leader_ = leader;
}

std::string LeaderGate::Refusal() const {
  MutexLock l(&mu_);
  return leader_.empty() ? "maru-server: not the leader (leader unknown)"
                         : "maru-server: not the leader; the leader is " + leader_;
}

}  // namespace maru
