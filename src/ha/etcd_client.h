// EtcdClient: the few calls of etcd's v3 API that leader election needs, over
// gRPC, to a cluster given as a list of endpoints (host:port).
//
// Every call has a deadline: an etcd that is down, partitioned or without a
// quorum gives a Status with a one-line message within the call's timeout,
// never a hang. A call that cannot reach one endpoint moves to the next one
// within the same deadline, and the client stays on the endpoint that last
// answered.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/status.h"

namespace maru {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // host:port (an http:// prefix is accepted)
  int64_t call_timeout_ms = 1000;      // one call, all the endpoints it tries
};

// Splits "a:1,b:2" into endpoints; strips http:// prefixes.
std::vector<std::string> ParseEtcdEndpoints(const std::string &list);

struct EtcdKeyValue {
  std::string key, value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;  // 0: the key does not exist
  int64_t lease = 0;
};

// One comparison of a transaction: `key`'s `target` compared with `number`
// (version, create or mod revision, lease) or `value`.
struct EtcdCompare {
  enum Target { kVersion, kCreate, kMod, kValue, kLease };
  enum Op { kEqual, kGreater, kLess, kNotEqual };
  std::string key;
  Target target = kVersion;
  Op op = kEqual;
  int64_t number = 0;
  std::string value;
};

// One operation of a transaction.
struct EtcdOp {
  enum Kind { kGet, kPut, kDelete };
  Kind kind = kGet;
  std::string key, value;
  int64_t lease = 0;    // kPut: attach to this lease
  bool prefix = false;  // kGet, kDelete: every key under `key`
};

struct EtcdTxnResult {
  bool succeeded = false;
  // For each kGet of the branch that ran, in order: what it found.
  std::vector<std::vector<EtcdKeyValue>> gets;
};

struct EtcdLease {
  int64_t id = 0;
  int64_t ttl_s = 0;  // as granted: etcd raises a TTL below its minimum
};

class EtcdClient {
 public:
  // Fails (EINVAL) on an empty or malformed endpoint list; does not connect.
  static Result<std::unique_ptr<EtcdClient>> Create(const EtcdOptions &options);
  ~EtcdClient();

  // The key's value, or a KeyValue with version 0 if it does not exist.
  Result<EtcdKeyValue> Get(const std::string &key);
  Result<std::vector<EtcdKeyValue>> GetPrefix(const std::string &prefix);
  Status Put(const std::string &key, const std::string &value, int64_t lease = 0);
  Status Delete(const std::string &key);
  Result<EtcdTxnResult> Txn(const std::vector<EtcdCompare> &compares,
                            const std::vector<EtcdOp> &success, const std::vector<EtcdOp> &failure);

  Result<EtcdLease> LeaseGrant(int64_t ttl_s);
  Status LeaseRevoke(int64_t id);
  // Renews the lease once; its TTL from now. ENOENT if it already expired.
  Result<int64_t> LeaseKeepAlive(int64_t id);
  // Whole seconds the lease has left (0: under one); ENOENT if it expired.
  Result<int64_t> LeaseTimeToLive(int64_t id);

  const std::vector<std::string> &endpoints() const;

 private:
  struct Impl;
  explicit EtcdClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The end of the range of every key that starts with `prefix`.
std::string EtcdPrefixEnd(const std::string &prefix);

}  // namespace maru
