// maructl quota: set and show how much of the pool (and how many pins) a
// directory tree or a uid may hold. Root sets quotas; anyone shows them.
#include <cinttypes>
#include <cstdio>

#include "common/json_output.h"
#include "maructl/maructl.h"
#include "util/units.h"

namespace maru::ctl {

Json QuotasJson(const google::protobuf::RepeatedPtrField<rpc::QuotaInfo> &quotas) {
  Json out = Json::array();
  for (const auto &q : quotas)
    out.push_back({{"target", q.target()},
                   {"by_uid", q.by_uid()},
                   {"limit", q.limit_bytes()},
                   {"used", q.used_bytes()},
                   {"pins_limit", q.limit_pins()},
                   {"pins_used", q.used_pins()}});
  return out;
}

void PrintQuotas(const google::protobuf::RepeatedPtrField<rpc::QuotaInfo> &quotas) {
  printf("%-32s %10s %10s %5s %10s %10s\n", "QUOTA", "LIMIT", "USED", "USE%", "PINS", "PINNED");
  for (const auto &q : quotas) {
    const double pct = q.limit_bytes() ? 100.0 * static_cast<double>(q.used_bytes()) /
                                             static_cast<double>(q.limit_bytes())
                                       : 0;
    printf("%-32s %10s %10s %4.0f%% %10s %10" PRIu64 "\n", q.target().c_str(),
           q.limit_bytes() ? FormatSize(q.limit_bytes()).c_str() : "-",
           FormatSize(q.used_bytes()).c_str(), pct,
           q.limit_pins() ? std::to_string(q.limit_pins()).c_str() : "-", q.used_pins());
  }
}

namespace {

int QuotaSet(int argc, char **argv) {
  int64_t uid = -1, pins = 0;
  Command cmd(
      "maructl quota set DIR|--uid UID BYTES [--pins N] [--server ADDRESS]",
      "Limits the pool space (BYTES, with K/M/G/T; none or 0: no limit) and the pins\n"
      "(--pins N) a directory tree or a uid holds. Both none removes the quota. Root only.");
  cmd.flags.Int("uid", &uid, "the quota is the uid's, over the chunks it owns");
  cmd.flags.Int("pins", &pins, "at most this many pinned chunks (0: no limit)");
  if (int rc = cmd.Parse(argc, argv, 3); rc >= 0) return rc;
  const size_t want = uid >= 0 ? 1 : 2;
  if (cmd.args.size() != want || pins < 0 || uid > UINT32_MAX)
    return Fail("quota set needs DIR BYTES or --uid UID BYTES (see --help)");
  const std::string &size = cmd.args.back();
  uint64_t bytes = 0;
  if (size != "none") {
    Result<uint64_t> parsed = ParseSize(size);
    if (!parsed.ok()) return Fail("bad size '" + size + "'");
    bytes = *parsed;
  }
  if (int rc = cmd.Connect()) return rc;
  rpc::SetQuotaRequest req;
  if (uid >= 0) {
    req.set_by_uid(true);
    req.set_uid(static_cast<uint32_t>(uid));
  } else {
    req.set_path(cmd.args[0]);
  }
  req.set_bytes(bytes);
  req.set_pins(static_cast<uint64_t>(pins));
  rpc::ErrorReply rep;
  return cmd.Call(&Stub::SetQuota, req, &rep, "quota set");
}

int QuotaShow(int argc, char **argv) {
  Command cmd("maructl quota show [--server ADDRESS] [--json]",
              "Every quota: its target, limit, bytes used, pin limit and pins used.");
  if (int rc = cmd.Parse(argc, argv, 3); rc >= 0) return rc;
  if (int rc = cmd.Connect()) return rc;
  rpc::StatsRequest req;
  rpc::QuotasReply rep;
  if (int rc = cmd.Call(&Stub::ListQuotas, req, &rep, "quota show")) return rc;
  if (cmd.json)
    PrintJson(QuotasJson(rep.quotas()));
  else
    PrintQuotas(rep.quotas());
  return 0;
}

}  // namespace

int Quota(int argc, char **argv) {
  const std::string sub = argc >= 3 ? argv[2] : "";
  if (sub == "set") return QuotaSet(argc, argv);
  if (sub == "show") return QuotaShow(argc, argv);
  return Fail("quota needs set or show (maructl quota set|show --help)");
}

}  // namespace maru::ctl
