#include "kv_trace.h"

#include <fstream>
#include <list>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace maru::bench {
namespace {

// Finds `"key":` and returns the position after the colon, or npos.
size_t FindKey(const std::string &line, const char *key) {
  std::string quoted = std::string("\"") + key + "\"";
  size_t at = line.find(quoted);
  if (at == std::string::npos) return at;
  at = line.find(':', at + quoted.size());
  return at == std::string::npos ? at : at + 1;
}

}  // namespace

Result<std::vector<TraceRequest>> ReadTrace(const std::string &path, size_t limit) {
  std::ifstream in(path);
  if (!in) return Status::Error(ENOENT, "cannot read trace " + path);
  std::vector<TraceRequest> out;
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    TraceRequest r;
    size_t ts = FindKey(line, "timestamp");
    if (ts != std::string::npos) r.timestamp_ms = strtoll(line.c_str() + ts, nullptr, 10);
    size_t ids = FindKey(line, "hash_ids");
    size_t open = ids == std::string::npos ? ids : line.find('[', ids);
    size_t close = open == std::string::npos ? open : line.find(']', open);
    if (close == std::string::npos)
      return Status::Error(EINVAL, path + ":" + std::to_string(lineno) + ": no \"hash_ids\" list");
    const char *p = line.c_str() + open + 1, *end = line.c_str() + close;
    while (p < end) {
      char *next;
      unsigned long long v = strtoull(p, &next, 10);
      if (next == p) {
        ++p;
        continue;
      }
      r.blocks.push_back(v);
      p = next;
    }
    out.push_back(std::move(r));
    if (limit && out.size() == limit) break;
  }
  return out;
}

SimResult SimulateLru(const std::vector<TraceRequest> &trace, uint64_t capacity) {
  SimResult r;
  std::list<uint64_t> order;  // front: most recent
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  for (const TraceRequest &req : trace) {
    r.blocks += req.blocks.size();
    size_t hits = 0;
    while (hits < req.blocks.size() && where.count(req.blocks[hits])) {
      order.splice(order.begin(), order, where[req.blocks[hits]]);
      ++hits;
    }
    r.hits += hits;
    for (size_t i = hits; i < req.blocks.size(); ++i) {
      uint64_t b = req.blocks[i];
      if (where.count(b) || capacity == 0) continue;  // stored already: left as it is
      if (order.size() >= capacity) {
        where.erase(order.back());
        order.pop_back();
      }
      order.push_front(b);
      where[b] = order.begin();
    }
  }
  return r;
}

SimResult SimulateBelady(const std::vector<TraceRequest> &trace, uint64_t capacity) {
  // Next use of every block, per reference position (request index).
  std::unordered_map<uint64_t, std::vector<size_t>> uses;
  for (size_t i = 0; i < trace.size(); ++i)
    for (uint64_t b : trace[i].blocks) {
      auto &u = uses[b];
      if (u.empty() || u.back() != i) u.push_back(i);
    }
  std::unordered_map<uint64_t, size_t> cursor;
  auto next_use = [&](uint64_t b, size_t now) -> size_t {
    auto &u = uses[b];
    size_t &c = cursor[b];
    while (c < u.size() && u[c] <= now) ++c;
    return c < u.size() ? u[c] : SIZE_MAX;
  };
  SimResult r;
  std::set<std::pair<size_t, uint64_t>> by_next;  // (next use, block)
  std::unordered_map<uint64_t, size_t> cached;    // block -> its key in by_next
  auto refresh = [&](uint64_t b, size_t now) {
    auto it = cached.find(b);
    if (it != cached.end()) by_next.erase({it->second, b});
    size_t n = next_use(b, now);
    cached[b] = n;
    by_next.insert({n, b});
  };
  for (size_t i = 0; i < trace.size(); ++i) {
    const auto &blocks = trace[i].blocks;
    r.blocks += blocks.size();
    size_t hits = 0;
    while (hits < blocks.size() && cached.count(blocks[hits])) ++hits;
    r.hits += hits;
    for (size_t j = 0; j < hits; ++j) refresh(blocks[j], i);
    for (size_t j = hits; j < blocks.size(); ++j) {
      uint64_t b = blocks[j];
      if (cached.count(b) || capacity == 0) {
        if (cached.count(b)) refresh(b, i);
        continue;
      }
      size_t n = next_use(b, i);
      if (cached.size() >= capacity) {
        auto victim = std::prev(by_next.end());
        if (victim->first <= n) continue;  // storing b would evict something needed sooner
        cached.erase(victim->second);
        by_next.erase(victim);
      }
      cached[b] = n;
      by_next.insert({n, b});
    }
  }
  return r;
}

}  // namespace maru::bench
