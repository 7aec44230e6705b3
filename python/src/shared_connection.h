// One connection to maru-server (a maru_t), shared by the Python Connection
// that made it and by every chunk handle it handed out.
#ifndef MARU_PY_SHARED_CONNECTION_H
#define MARU_PY_SHARED_CONNECTION_H

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "maru_direct.h"

namespace maru_py {

// maru_disconnect() unmaps the pool and drops every lease, so it may only
// run once nothing points into the pool any more: Connection.close() drops
// the connection's reference, and the maru_t is disconnected when the last
// chunk (and so the last buffer view of one) is gone too.
class SharedConnection {
 public:
  // Connects (the GIL must be released); a negative errno on failure.
  static int Connect(const std::optional<std::string> &target,
                     const std::optional<std::string> &instance,
                     std::shared_ptr<SharedConnection> *out);
  ~SharedConnection();
  SharedConnection(const SharedConnection &) = delete;
  SharedConnection &operator=(const SharedConnection &) = delete;

  maru_t *get() const { return m_; }
  // True in a child forked after the connection was made: there the C
  // library must not be called at all (it shares the RPC runtime's event
  // loop with the parent until exec).
  bool Forked() const;
  // Raises ForkError when Forked().
  void CheckFork() const;

 private:
  SharedConnection(maru_t *m, pid_t pid) : m_(m), pid_(pid) {}
  maru_t *m_;
  pid_t pid_;
};

}  // namespace maru_py

#endif  // MARU_PY_SHARED_CONNECTION_H
