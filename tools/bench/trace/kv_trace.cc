#include "bench/trace/kv_trace.h"

#include <fstream>
#include <list>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

namespace maru::bench {
namespace {

// nlohmann's message without its "[json.exception...] parse error at line 1, "
// prefix: the line number is ours to give.
std::string ParseErrorText(const nlohmann::json::parse_error &e) {
  std::string what = e.what();
  const std::string marker = "line 1, ";
  size_t at = what.find(marker);
  return at == std::string::npos ? what : what.substr(at + marker.size());
}

// One request of the trace; an error says what is wrong with the line.
Result<TraceRequest> ParseRequest(const std::string &line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error &e) {
    return Status::Error(EINVAL, "not JSON: " + ParseErrorText(e));
  }
  if (!j.is_object()) return Status::Error(EINVAL, "not a JSON object");
  TraceRequest r;
  auto ts = j.find("timestamp");
  if (ts != j.end()) {
    if (!ts->is_number()) return Status::Error(EINVAL, "\"timestamp\" is not a number");
    r.timestamp_ms =
        ts->is_number_float() ? static_cast<int64_t>(ts->get<double>()) : ts->get<int64_t>();
  }
  for (auto [field, to] :
       {std::pair{"input_length", &r.input_tokens}, std::pair{"output_length", &r.output_tokens}}) {
    auto length = j.find(field);
    if (length == j.end()) continue;
    if (!length->is_number_unsigned())
      return Status::Error(EINVAL, "\"" + std::string(field) + "\" is not a token count");
    *to = length->get<uint64_t>();
  }
  auto ids = j.find("hash_ids");
  if (ids == j.end() || !ids->is_array()) return Status::Error(EINVAL, "no \"hash_ids\" list");
  r.blocks.reserve(ids->size());
  for (const auto &id : *ids) {
    if (!id.is_number_unsigned()) {
      const std::string shown = id.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return Status::Error(EINVAL, "\"hash_ids\" holds " + shown + ", not a block number");
    }
    r.blocks.push_back(id.get<uint64_t>());
  }
  return r;
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
    Result<TraceRequest> r = ParseRequest(line);
    if (!r.ok())
      return Status::Error(EINVAL,
                           path + ":" + std::to_string(lineno) + ": " + r.status().message());
    out.push_back(std::move(*r));
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
