// maru-bench policies: eviction policies side by side, offline, over a
// trace and synthetic ones, at several capacities: block hit, token hit and
// the recompute FLOPs the cache saved, next to Belady's optimum.
#include <cinttypes>
#include <unordered_set>

#include "bench/common.h"
#include "bench/trace/kv_trace.h"
#include "bench/trace/policy_sim.h"
#include "bench/trace/synthetic_trace.h"
#include "bench/trace/trace_hints.h"
#include "common/json_output.h"

namespace maru::bench {
namespace {

struct NamedTrace {
  std::string name;
  std::vector<TraceRequest> requests;
};

size_t DistinctBlocks(const std::vector<TraceRequest> &trace) {
  std::unordered_set<uint64_t> seen;
  for (const TraceRequest &r : trace) seen.insert(r.blocks.begin(), r.blocks.end());
  return seen.size();
}

std::vector<std::string> SplitList(const std::string &list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int RunPolicies(int argc, char **argv) {
  std::string trace_path, policies_list, fractions_list = "0.045,0.09,0.18",
                                         synthetic_list = "scan,hot-prefix";
  int64_t limit = 0, synthetic_requests = 12000, capacity_blocks = 0;
  bool json = false;
  Flags flags("maru-bench policies [--trace FILE] [--policies A,B] [--capacities F,G] [--json]",
              "Simulates eviction policies offline, as maru-bench replay serves a trace with\n"
              "one client, at capacities given as fractions of the trace's distinct blocks.\n"
              "Prints one Markdown row per trace, capacity and policy: block hit ratio,\n"
              "token hit ratio, recompute saved (attention + MLP FLOPs of the prompt tokens\n"
              "served from cache, Llama-3.1-8B), and Belady's block hit ratio.");
  flags.String("trace", &trace_path, "trace file (JSON lines with hash_ids); none: synthetic only");
  flags.String("policies", &policies_list,
               "comma-separated server policies, each with :HINTS or not (default: all three)");
  flags.String("capacities", &fractions_list, "comma-separated fractions of the distinct blocks");
  flags.Int("capacity-blocks", &capacity_blocks,
            "one capacity in blocks instead of --capacities (as maru-bench replay prints it)");
  flags.String("synthetic", &synthetic_list, "synthetic traces to add (scan, hot-prefix; '' none)");
  flags.Int("synthetic-requests", &synthetic_requests, "requests per synthetic trace");
  flags.Int("limit", &limit, "use only the first N requests of --trace (0: all)");
  flags.Bool("json", &json, "one JSON line per row instead of Markdown");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  if (limit < 0 || synthetic_requests < 0 || capacity_blocks < 0)
    return Fail("--limit, --synthetic-requests and --capacity-blocks must be >= 0");

  std::vector<NamedTrace> traces;
  if (!trace_path.empty()) {
    Result<std::vector<TraceRequest>> t = ReadTrace(trace_path, static_cast<size_t>(limit));
    if (!t.ok()) return Fail(t.status().message());
    const size_t slash = trace_path.rfind('/');
    traces.push_back(
        {slash == std::string::npos ? trace_path : trace_path.substr(slash + 1), std::move(*t)});
  }
  for (const std::string &name : SplitList(synthetic_list)) {
    Result<std::vector<TraceRequest>> t =
        SyntheticTrace(name, static_cast<size_t>(synthetic_requests));
    if (!t.ok()) return Fail(t.status().message());
    traces.push_back({"synthetic " + name, std::move(*t)});
  }
  if (traces.empty()) return Fail("no trace: give --trace or --synthetic");
  std::vector<std::string> policies =
      policies_list.empty() ? EvictionPolicyNames() : SplitList(policies_list);
  for (const std::string &p : policies)
    if (Result<std::pair<std::string, HintModel>> h = ParseHintedName(p); !h.ok())
      return Fail(h.status().message());
  std::vector<double> fractions;
  for (const std::string &f : SplitList(fractions_list)) {
    char *end;
    double v = strtod(f.c_str(), &end);
    if (*end || !(v > 0 && v <= 1)) return Fail("--capacities: '" + f + "' is not in (0, 1]");
    fractions.push_back(v);
  }
  if (capacity_blocks > 0) fractions = {0};  // one capacity, given in blocks

  const RecomputeCost cost = Llama8BCost();
  if (!json)
    printf(
        "| trace | capacity | policy | block hit | token hit | recompute saved | vs LRU | of "
        "LRU→Belady gap |\n|---|---|---|---|---|---|---|---|\n");
  for (const NamedTrace &t : traces) {
    const size_t distinct = DistinctBlocks(t.requests);
    for (double fraction : fractions) {
      const uint64_t capacity =
          capacity_blocks > 0 ? static_cast<uint64_t>(capacity_blocks)
                              : static_cast<uint64_t>(fraction * static_cast<double>(distinct));
      fraction = static_cast<double>(capacity) / static_cast<double>(distinct);
      const double lru = SimulateLru(t.requests, capacity).hit_ratio();
      const double belady = SimulateBelady(t.requests, capacity).hit_ratio();
      for (const std::string &policy : policies) {
        Result<PolicyFigures> f = SimulatePolicy(t.requests, capacity, policy, cost);
        if (!f.ok()) return Fail(f.status().message());
        const double gap = belady > lru ? (f->block_hit() - lru) / (belady - lru) : 0;
        if (json) {
          PrintJson({{"trace", t.name},
                     {"capacity_blocks", capacity},
                     {"capacity_fraction", fraction},
                     {"policy", policy},
                     {"block_hit", Rounded(f->block_hit(), 5)},
                     {"token_hit", Rounded(f->token_hit(), 5)},
                     {"recompute_saved", Rounded(f->saved(), 5)},
                     {"lru_block_hit", Rounded(lru, 5)},
                     {"belady_block_hit", Rounded(belady, 5)}});
          continue;
        }
        printf("| %s | %.1f%% (%" PRIu64 ") | %s | %.4f | %.4f | %.4f | %.3f× | %+.0f%% |\n",
               t.name.c_str(), 100 * fraction, capacity, policy.c_str(), f->block_hit(),
               f->token_hit(), f->saved(), lru > 0 ? f->block_hit() / lru : 0, 100 * gap);
      }
      if (!json)
        printf("| %s | %.1f%% (%" PRIu64 ") | *Belady* | %.4f | | | %.3f× | +100%% |\n",
               t.name.c_str(), 100 * fraction, capacity, belady, lru > 0 ? belady / lru : 0);
      fflush(stdout);
    }
  }
  return 0;
}

}  // namespace maru::bench
