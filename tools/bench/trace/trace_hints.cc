#include "bench/trace/trace_hints.h"

#include <cstdlib>
#include <unordered_set>

namespace maru::bench {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform draw in [0, 1) for request `i` and stream `salt`.
double Draw(uint64_t i, uint64_t salt) {
  return static_cast<double>(Mix(i * 2 + salt) >> 11) / static_cast<double>(1ULL << 53);
}

// Whether a later request extends request i's conversation: holds its
// last full block (index n-2: the same id means the same tokens before it).
std::vector<bool> ConversationGoesOn(const std::vector<TraceRequest> &trace) {
  std::vector<bool> goes_on(trace.size(), false);
  std::unordered_set<uint64_t> later;  // blocks some later request holds
  for (size_t i = trace.size(); i-- > 0;) {
    const std::vector<uint64_t> &b = trace[i].blocks;
    goes_on[i] = b.size() >= 2 && later.count(b[b.size() - 2]) > 0;
    later.insert(b.begin(), b.end());
  }
  return goes_on;
}

Status BadSuffix(const std::string &part) {
  return Status::Error(EINVAL, "hints: '" + part +
                                   "' is not keep, keep+drop, late-N, miss-PCT or wrong-PCT "
                                   "(POLICY:keep[+drop][:late-N][:miss-P][:wrong-P])");
}

}  // namespace

Result<std::pair<std::string, HintModel>> ParseHintedName(const std::string &name) {
  HintModel model;
  const size_t colon = name.find(':');
  if (colon == std::string::npos) return std::make_pair(name, model);
  std::string rest = name.substr(colon + 1);
  while (!rest.empty()) {
    const size_t next = rest.find(':');
    const std::string part = rest.substr(0, next);
    rest = next == std::string::npos ? "" : rest.substr(next + 1);
    if (part == "keep" || part == "keep+drop") {
      model.keep = true;
      model.drop = part == "keep+drop";
      continue;
    }
    if (part.rfind("late-", 0) == 0) {
      const std::string n = part.substr(5);
      char *end = nullptr;
      const unsigned long long v = strtoull(n.c_str(), &end, 10);
      if (n.empty() || n[0] == '-' || *end || v > (1ULL << 32)) return BadSuffix(part);
      model.late = static_cast<size_t>(v);
      continue;
    }
    double *to = part.rfind("miss-", 0) == 0    ? &model.missing
                 : part.rfind("wrong-", 0) == 0 ? &model.wrong
                                                : nullptr;
    if (!to) return BadSuffix(part);
    const std::string pct = part.substr(part.find('-') + 1);
    char *end = nullptr;
    const double v = strtod(pct.c_str(), &end) / 100;
    if (pct.empty() || *end || !(v >= 0 && v <= 1)) return BadSuffix(part);
    *to = v;
  }
  if (!model.keep && (model.missing > 0 || model.wrong > 0)) return BadSuffix(name);
  if (model.late > 0 && !model.drop) return BadSuffix(name);
  return std::make_pair(name.substr(0, colon), model);
}

std::vector<std::vector<HintEvent>> TraceHints(const std::vector<TraceRequest> &trace,
                                               const HintModel &model) {
  std::vector<std::vector<HintEvent>> events(trace.size());
  if (!model.keep) return events;
  const std::vector<bool> goes_on = ConversationGoesOn(trace);
  // Backwards, so that a request's own hint comes before a late drop given with it.
  for (size_t i = trace.size(); i-- > 0;) {
    if (trace[i].blocks.size() < 2) continue;
    RetentionHint h = goes_on[i]   ? RetentionHint::kKeep
                      : model.drop ? RetentionHint::kDrop
                                   : RetentionHint::kNone;
    if (Draw(i, 1) < model.wrong) {
      const RetentionHint other = model.drop ? RetentionHint::kDrop : RetentionHint::kNone;
      h = h == RetentionHint::kKeep ? other : RetentionHint::kKeep;
    }
    if (Draw(i, 0) < model.missing) h = RetentionHint::kNone;
    if (h == RetentionHint::kDrop && model.late > 0) {
      // Open when served; known to have ended only later.
      events[i].push_back({i, RetentionHint::kKeep});
      const size_t at = i + model.late;
      if (at < trace.size()) events[at].push_back({i, RetentionHint::kDrop});
    } else if (h != RetentionHint::kNone) {
      events[i].push_back({i, h});
    }
  }
  return events;
}

}  // namespace maru::bench
