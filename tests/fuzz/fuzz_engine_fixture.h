// What the engine-level fuzzers share: a real MetaEngine on a fresh pool in
// /dev/shm, with a live session for each of three callers (root, uid 1000,
// nobody), removed when the fuzzer exits.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "alloc/pool_device.h"
#include "meta/meta_engine.h"

namespace maru::fuzz {

constexpr uint32_t kUids[3] = {0, 1000, kNobody};

struct EngineFixture {
  std::string pool, dir;
  std::unique_ptr<MetaEngine> engine;
  Caller callers[3];
  uint64_t sessions[3] = {};
};

// Opens the engine behind pool "/dev/shm/maru-fuzz-NAME-PID.pool"; aborts on
// failure (there is nothing to fuzz without it).
inline void OpenEngine(const std::string &name, EngineFixture *f) {
  f->pool = "/dev/shm/maru-fuzz-" + name + "-" + std::to_string(getpid()) + ".pool";
  char tmpl[] = "/tmp/maru-fuzz.XXXXXX";
  if (!mkdtemp(tmpl)) abort();
  f->dir = tmpl;
  FormatOptions format;
  format.size = 64 << 20;
  format.force = true;
  if (!FormatPool(f->pool, format).ok()) abort();
  EngineOptions options;
  options.pool_paths = {f->pool};
  options.db_dir = f->dir + "/db";
  options.session_timeout_ms = 60000;
  options.grace_ms = 0;
  Result<std::unique_ptr<MetaEngine>> engine = MetaEngine::Open(options);
  if (!engine.ok()) abort();
  f->engine = std::move(*engine);
  for (int i = 0; i < 3; ++i) {
    f->callers[i].uid = f->callers[i].gid = kUids[i];
    f->callers[i].pid = 1;
    rpc::OpenSessionRequest req;
    rpc::OpenSessionReply rep;
    f->engine->OpenSession(f->callers[i], req, &rep);
    f->sessions[i] = rep.session();
  }
}

// Closes the engine and removes its pool and database.
inline void CloseEngine(EngineFixture *f) {
  f->engine.reset();
  unlink(f->pool.c_str());
  std::string rm = "rm -rf '" + f->dir + "'";
  if (system(rm.c_str()) != 0) return;
}

}  // namespace maru::fuzz
