#include "client/index_session.h"

#include "util/path.h"

namespace maru {

IndexSession::IndexSession(MetaClient *client, bool enabled, bool flush, PoolIndex pool, bool local)
    : client_(client), enabled_(enabled), flush_(flush), pool_(pool), local_(local) {}

IndexReader *IndexSession::Current() {
  IndexReader *r = current_.load(std::memory_order_acquire);
  if (r && r->Live()) return r;
  if (!enabled_) return nullptr;
  // Not live: the server restarted or took the region back. The session
  // reply names the new one only after a resume; look once per resume.
  const uint64_t epoch = client_->resume_epoch();
  if (seen_epoch_.load() == epoch) return nullptr;
  MutexLock lock(&mu_);
  if (seen_epoch_.load() == epoch) return current_.load();
  const rpc::OpenSessionReply info = client_->session_info();
  seen_epoch_.store(epoch);
  r = current_.load();
  if (r && r->instance() == info.index_instance() && r->region() == info.index_region() &&
      r->token() == info.index_token())
    return r->Live() ? r : nullptr;
  if (!info.index_in_pool() && !local_) return nullptr;
  std::unique_ptr<IndexReader> fresh = IndexReader::Attach(info, flush_, pool_);
  if (!fresh) return nullptr;
  r = fresh.get();
  readers_.push_back(std::move(fresh));
  current_.store(r, std::memory_order_release);
  return r;
}

std::string_view CanonicalPath(const char *path, std::string *scratch) {
  // Valid paths (CheckPath) differ from the canonical form only by repeated
  // or trailing slashes: most have none and are used as they are.
  const std::string_view p(path);
  if (p.size() > 1 && p.back() != '/' && p.find("//") == std::string_view::npos) return p;
  thread_local std::vector<std::string_view> parts;
  if (!SplitPathViews(p, &parts).ok() || parts.empty()) return {};
  scratch->clear();
  for (std::string_view part : parts) {
    scratch->push_back('/');
    scratch->append(part);
  }
  return *scratch;
}

}  // namespace maru
