// maructl: what its subcommand families (pool.cc, namespace.cc,
// admin.cc, quota.cc) share: errors, times, and the options and connection of
// the commands that talk to a server. See man/maructl.8.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client/meta_client.h"
#include "common/json_output.h"
#include "util/address.h"
#include "util/flags.h"

namespace maru::ctl {

using Stub = rpc::Meta::Stub;

// Prints "maructl: MESSAGE" on stderr; returns the exit code 1.
int Fail(const std::string &message);
// A wall-clock time in nanoseconds as local "YYYY-MM-DD HH:MM:SS"; "-" for 0.
std::string Time(int64_t ns);

// Common options of the commands that talk to a server.
struct Command {
  std::string server = kDefaultServerAddress;
  bool json = false;
  Flags flags;
  std::vector<std::string> args;
  std::unique_ptr<MetaClient> client;

  Command(const std::string &usage, const std::string &summary);
  // Parses argv from `first`; returns -1 to go on, else the exit code.
  int Parse(int argc, char **argv, int first);
  int Connect();

  template <typename Req, typename Rep>
  int Call(MetaClient::Method<Req, Rep> method, Req &req, Rep *rep, const std::string &what) {
    int rc = client->Call(method, req, rep);
    return rc < 0 ? Fail(what + ": " + strerror(-rc)) : 0;
  }
};

// The commands: each gets the whole argv (argv[1] is its name).
int Mkpool(int argc, char **argv);
int PoolShow(int argc, char **argv);
int Ls(int argc, char **argv);
int Stat(int argc, char **argv);
int Pin(int argc, char **argv);
int Unpin(int argc, char **argv);
int Hint(int argc, char **argv);
int Evict(int argc, char **argv);
int Df(int argc, char **argv);
int Fsck(int argc, char **argv);
int Verify(int argc, char **argv);
int Sessions(int argc, char **argv);
int Stats(int argc, char **argv);
int Quota(int argc, char **argv);
int Cluster(int argc, char **argv);

// Quotas as df and quota show print them (quota.cc).
Json QuotasJson(const google::protobuf::RepeatedPtrField<rpc::QuotaInfo> &quotas);
void PrintQuotas(const google::protobuf::RepeatedPtrField<rpc::QuotaInfo> &quotas);

}  // namespace maru::ctl
