// A member of a leader election, as a maru-server runs one, for the HA tests:
//   ha_candidate --etcd EPS --pool POOL --id ID --shared FILE
//                [--ttl S] [--give-up MS] [--not-electable]
// It campaigns for POOL (a pool file formatted by maructl: the election is
// the pool's UUID's), raises the fencing epoch in the pool's control page
// when elected, then writes to FILE, which stands in for a structure shared
// in the pool (word E counts the writes made under epoch E), checking the
// fence and its lease before each write, until it loses. It prints one line per event on stdout:
// "leader E", "renewed N", "lost", "fenced", "not leading", "refused: ...",
// "campaign: ...", and exits with a code that says why it stopped.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "alloc/pool_control.h"
#include "alloc/pool_device.h"
#include "ha/leader_election.h"

namespace {

constexpr uint64_t kWords = 512;

void Say(const std::string &line) {
  std::string l = line + "\n";
  if (write(1, l.data(), l.size()) < 0) _exit(9);
}

}  // namespace

int main(int argc, char **argv) {
  maru::ElectionOptions options;
  std::string pool, shared;
  bool electable = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--etcd")
      options.etcd.endpoints = maru::ParseEtcdEndpoints(next());
    else if (a == "--pool")
      pool = next();
    else if (a == "--id")
      options.id = next();
    else if (a == "--shared")
      shared = next();
    else if (a == "--ttl")
      options.ttl_s = std::stoll(next());
    else if (a == "--give-up")
      options.give_up_ms = std::stoll(next());
    else if (a == "--not-electable")
      electable = false;
    else {
      fprintf(stderr, "ha_candidate: unknown argument %s\n", a.c_str());
      return 1;
    }
  }
  options.endpoint = "unix:///run/" + options.id + ".sock";
  options.on_lost = [] { Say("lost"); };
  maru::Result<std::unique_ptr<maru::PoolDevice>> device =
      maru::PoolDevice::Open(pool, maru::PoolDevice::OpenOptions());
  if (!device.ok()) {
    fprintf(stderr, "ha_candidate: %s\n", device.status().ToString().c_str());
    return 1;
  }
  maru::Result<maru::PoolControl> control =
      maru::PoolControl::At((*device)->base(), (*device)->superblock());
  if (!control.ok()) {
    fprintf(stderr, "ha_candidate: %s\n", control.status().ToString().c_str());
    return 1;
  }
  options.pool = maru::UuidToString((*device)->superblock().pool_uuid);
  int fd = open(shared.c_str(), O_RDWR);
  if (fd < 0) {
    perror("ha_candidate: shared file");
    return 1;
  }
  void *map = mmap(nullptr, kWords * 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return 1;
  auto *words = static_cast<std::atomic<uint64_t> *>(map);

  maru::Result<std::unique_ptr<maru::LeaderElection>> election =
      maru::LeaderElection::Start(options);
  if (!election.ok()) {
    fprintf(stderr, "ha_candidate: %s\n", election.status().ToString().c_str());
    return 2;
  }
  maru::LeaderElection &e = **election;
  if (!electable) e.SetLag(1 << 20, false);
  Say("member");
  for (;;) {
    maru::Result<uint64_t> epoch = e.Campaign();
    if (!epoch.ok()) {
      Say("campaign: " + epoch.status().ToString());
      return 3;
    }
    maru::Status raised = control->RaiseFence(*epoch);
    if (!raised.ok()) {
      Say("refused: " + raised.message());
      e.Resign();
      return 4;
    }
    Say("leader " + std::to_string(*epoch));
    int64_t said = 0;
    for (;;) {
      // What every writer of shared structures does before each write.
      if (!control->Holds(*epoch)) {
        Say("fenced");
        return 5;
      }
      if (!e.Leading()) break;
      if (*epoch < kWords) words[*epoch].fetch_add(1);
      if (e.renewals() >= said + 10) {
        said = e.renewals();
        Say("renewed " + std::to_string(said));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    Say("not leading");
  }
}
