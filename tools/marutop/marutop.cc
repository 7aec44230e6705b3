// marutop: a live view of a running maru-server. See man/marutop.1.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "client/meta_client.h"
#include "util/address.h"
#include "util/clock.h"
#include "util/flags.h"
#include "util/histogram.h"
#include "util/units.h"

using namespace maru;

namespace {

constexpr int kWidth = 80;

enum class SortKey { kRate, kP99, kName };

struct Sample {
  rpc::StatsReply stats;
  rpc::StatfsReply statfs;
  int64_t at_ns = 0;
};

// One operation's figures over the last interval.
struct OpRow {
  std::string op;
  double rate = 0, p50 = 0, p99 = 0;
  uint64_t errors = 0;
};

std::vector<OpRow> Rows(const Sample &now, const Sample &before, SortKey sort) {
  const double secs = std::max(1e-3, static_cast<double>(now.at_ns - before.at_ns) / 1e9);
  std::map<std::string, const rpc::OpStats *> prev;
  for (const auto &o : before.stats.ops()) prev[o.op()] = &o;
  std::vector<double> bounds(now.stats.bucket_bounds_us().begin(),
                             now.stats.bucket_bounds_us().end());
  std::vector<OpRow> rows;
  for (const auto &o : now.stats.ops()) {
    const rpc::OpStats *p = prev.count(o.op()) ? prev[o.op()] : nullptr;
    uint64_t count = o.count() - (p ? p->count() : 0);
    if (count == 0) continue;
    std::vector<uint64_t> delta;
    for (int i = 0; i < o.buckets_size(); ++i)
      delta.push_back(o.buckets(i) - (p && i < p->buckets_size() ? p->buckets(i) : 0));
    rows.push_back({o.op(), static_cast<double>(count) / secs,
                    HistogramPercentile(delta, bounds, 0.5),
                    HistogramPercentile(delta, bounds, 0.99), o.errors() - (p ? p->errors() : 0)});
  }
  std::sort(rows.begin(), rows.end(), [&](const OpRow &a, const OpRow &b) {
    if (sort == SortKey::kP99) return a.p99 > b.p99;
    if (sort == SortKey::kName) return a.op < b.op;
    return a.rate > b.rate;
  });
  return rows;
}

std::string Bar(double fraction, int width) {
  int full = static_cast<int>(std::lround(std::clamp(fraction, 0.0, 1.0) * width));
  return "[" + std::string(full, '#') + std::string(width - full, '.') + "]";
}

std::string Uptime(int64_t ns) {
  int64_t s = ns / 1000000000;
  char buf[32];
  if (s >= 86400)
    snprintf(buf, sizeof(buf), "%" PRId64 "d%02" PRId64 "h", s / 86400, s % 86400 / 3600);
  else
    snprintf(buf, sizeof(buf), "%" PRId64 "h%02" PRId64 "m", s / 3600, s % 3600 / 60);
  return buf;
}

// "instances vllm-0 vllm-1 x2 ...": the sessions that gave a name, most first.
std::string Instances(const rpc::StatsReply &st) {
  std::vector<std::pair<uint64_t, std::string>> named;
  for (const auto &[name, n] : st.sessions_by_instance())
    if (!name.empty()) named.emplace_back(n, name);
  std::sort(named.begin(), named.end(), [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::string line = named.empty() ? "" : "instances";
  for (const auto &[n, name] : named) line += " " + name + (n > 1 ? " x" + std::to_string(n) : "");
  return line;
}

// "quotas /a 3M/4M uid:1001 1M/2M ...": the quotas, fullest first.
std::string Quotas(const rpc::StatsReply &st) {
  std::vector<std::pair<double, std::string>> rows;
  for (const auto &q : st.quotas()) {
    const double frac =
        q.limit_bytes() ? static_cast<double>(q.used_bytes()) / static_cast<double>(q.limit_bytes())
                        : 0;
    rows.emplace_back(frac, q.target() + " " + FormatSize(q.used_bytes()) + "/" +
                                (q.limit_bytes() ? FormatSize(q.limit_bytes()) : "-"));
  }
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a > b; });
  std::string line = rows.empty() ? "" : "quotas";
  for (const auto &[frac, text] : rows) line += "  " + text;
  return line;
}

// The screen, as lines of at most 80 columns; at most `height` lines.
std::vector<std::string> Render(const std::string &server, const Sample &now, const Sample &before,
                                SortKey sort, int height) {
  std::vector<std::string> lines;
  char buf[256];
  const rpc::StatsReply &st = now.stats;
  const double secs = std::max(1e-3, static_cast<double>(now.at_ns - before.at_ns) / 1e9);
  auto rate = [&](uint64_t a, uint64_t b) { return static_cast<double>(a - b) / secs; };
  snprintf(buf, sizeof(buf), "marutop  %-34.34s up %-7s sessions %-4" PRIu64 " pins %" PRIu64,
           server.c_str(), Uptime(st.uptime_ns()).c_str(), st.sessions(), st.pins());
  if (st.leader_epoch())  // one of several servers of the pool (docs/ha.md)
    snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "  leads at epoch %" PRIu64,
             st.leader_epoch());
  lines.push_back(buf);
  if (st.members_size()) {
    std::string servers = "servers ";
    for (const auto &m : st.members())
      servers += " " + m.id() +
                 (m.leads() ? " (leader)"
                            : " lag " + std::to_string(m.lag_bytes()) + "B" +
                                  (m.electable() ? "" : " behind"));
    lines.push_back(servers);
  }
  for (const auto &d : now.statfs.devices()) {
    double frac = d.size() ? static_cast<double>(d.used()) / static_cast<double>(d.size()) : 0;
    std::string path =
        d.path().size() > 22 ? "..." + d.path().substr(d.path().size() - 19) : d.path();
    snprintf(buf, sizeof(buf), "dev%-2u %-22s %s %3.0f%% %6s/%-6s", d.index(), path.c_str(),
             Bar(frac, 28).c_str(), 100 * frac, FormatSize(d.used()).c_str(),
             FormatSize(d.size()).c_str());
    lines.push_back(buf);
  }
  const uint64_t lookups = st.lookups() - before.stats.lookups();
  const uint64_t hits = st.lookup_hits() - before.stats.lookup_hits();
  const double hit_ratio = lookups ? static_cast<double>(hits) / static_cast<double>(lookups) : 0;
  const double all_hit =
      st.lookups() ? static_cast<double>(st.lookup_hits()) / static_cast<double>(st.lookups()) : 0;
  snprintf(buf, sizeof(buf), "hit ratio %.3f (all time %.3f)  lookups/s %-8.0f evictions/s %-6.1f",
           hit_ratio, all_hit, static_cast<double>(lookups) / secs,
           rate(st.evictions(), before.stats.evictions()));
  lines.push_back(buf);
  snprintf(buf, sizeof(buf),
           "stored %s/s  loaded %s/s  chunks %" PRIu64 "  leases %" PRIu64 "  reserved %s",
           FormatSize(static_cast<uint64_t>(rate(st.bytes_stored(), before.stats.bytes_stored())))
               .c_str(),
           FormatSize(static_cast<uint64_t>(rate(st.bytes_loaded(), before.stats.bytes_loaded())))
               .c_str(),
           st.chunks(), st.leases(), FormatSize(now.statfs.reserved()).c_str());
  lines.push_back(buf);
  if (std::string named = Instances(st); !named.empty()) lines.push_back(named);
  if (std::string quotas = Quotas(st); !quotas.empty()) lines.push_back(quotas);
  lines.push_back("");
  const char *sort_name = sort == SortKey::kP99 ? "p99" : sort == SortKey::kName ? "name" : "ops/s";
  snprintf(buf, sizeof(buf), "%-16s %10s %10s %10s %8s   sorted by %s", "OPERATION", "OPS/S",
           "P50 us", "P99 us", "ERRORS", sort_name);
  lines.push_back(buf);
  std::vector<OpRow> rows = Rows(now, before, sort);
  std::vector<rpc::DirUsage> dirs(st.top_dirs().begin(), st.top_dirs().end());
  std::sort(dirs.begin(), dirs.end(),
            [](const auto &a, const auto &b) { return a.bytes() > b.bytes(); });
  const int dir_lines = dirs.empty() ? 0 : 2 + static_cast<int>(std::min<size_t>(dirs.size(), 4));
  const int room = height - static_cast<int>(lines.size()) - dir_lines - 1;
  int shown = 0;
  for (const OpRow &r : rows) {
    if (shown >= room) break;
    snprintf(buf, sizeof(buf), "%-16s %10.1f %10.1f %10.1f %8" PRIu64, r.op.c_str(), r.rate, r.p50,
             r.p99, r.errors);
    lines.push_back(buf);
    ++shown;
  }
  if (rows.empty()) lines.push_back("(no requests in the last interval)");
  if (!dirs.empty()) {
    lines.push_back("");
    snprintf(buf, sizeof(buf), "%-40s %12s %10s", "TOP DIRECTORIES", "BYTES", "CHUNKS");
    lines.push_back(buf);
    for (size_t i = 0; i < dirs.size() && i < 4; ++i) {
      snprintf(buf, sizeof(buf), "/%-39.39s %12s %10" PRIu64, dirs[i].name().c_str(),
               FormatSize(dirs[i].bytes()).c_str(), dirs[i].chunks());
      lines.push_back(buf);
    }
  }
  for (auto &l : lines)
    if (l.size() > kWidth) l.resize(kWidth);
  if (static_cast<int>(lines.size()) > height) lines.resize(static_cast<size_t>(height));
  return lines;
}

int TakeSample(MetaClient &client, Sample *s) {
  rpc::StatsRequest req;
  rpc::StatfsRequest freq;
  if (int rc = client.Call(&rpc::Meta::Stub::Stats, req, &s->stats)) return rc;
  if (int rc = client.Call(&rpc::Meta::Stub::Statfs, freq, &s->statfs)) return rc;
  s->at_ns = MonotonicNs();
  return 0;
}

termios g_saved;
bool g_raw = false;

void RestoreTerminal() {
  if (g_raw) tcsetattr(STDIN_FILENO, TCSANOW, &g_saved);
  if (g_raw) fputs("\033[?25h\n", stdout);
  g_raw = false;
}

}  // namespace

int main(int argc, char **argv) {
  std::string server = kDefaultServerAddress;
  double interval = 1.0;
  bool once = false;
  Flags flags("marutop [--server ADDRESS] [--interval SECONDS] [--once]",
              "A top-style live view of a maru-server: pool usage per device, operations per\n"
              "second with p50/p99 latencies, hit ratio, evictions, sessions and the largest\n"
              "top-level directories. Keys: q quit, s change the sort (ops/s, p99, name),\n"
              "+/- refresh slower/faster.");
  flags.String("server", &server, "maru-server address");
  flags.Double("interval", &interval, "seconds between refreshes");
  flags.Bool("once", &once, "print one screen as plain text and exit (for scripts)");
  std::vector<std::string> args;
  Status s = flags.Parse(argc, argv, 1, &args);
  if (!s.ok()) return fprintf(stderr, "marutop: %s\n", s.message().c_str()), 1;
  if (flags.help_requested()) return fputs(flags.Help().c_str(), stdout), 0;
  if (!args.empty() || interval <= 0)
    return fprintf(stderr, "marutop: bad arguments (see --help)\n"), 1;

  ClientOptions options;
  options.client_name = "marutop";
  options.retry_window_ms = 2000;
  Result<std::unique_ptr<MetaClient>> client = MetaClient::Connect(server, options);
  if (!client.ok()) {
    fprintf(stderr, "marutop: %s (%s)\n", client.status().message().c_str(),
            strerror(client.status().errnum()));
    return 1;
  }
  Sample before, now;
  if (int rc = TakeSample(**client, &before))
    return fprintf(stderr, "marutop: %s\n", strerror(-rc)), 1;
  SortKey sort = SortKey::kRate;
  if (once) {
    usleep(static_cast<useconds_t>(interval * 1e6));
    if (int rc = TakeSample(**client, &now))
      return fprintf(stderr, "marutop: %s\n", strerror(-rc)), 1;
    for (const auto &l : Render(server, now, before, sort, 24)) puts(l.c_str());
    return 0;
  }
  if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
    return fprintf(stderr, "marutop: needs a terminal (use --once for scripts)\n"), 1;
  tcgetattr(STDIN_FILENO, &g_saved);
  termios raw = g_saved;
  raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
  tcsetattr(STDIN_FILENO, TCSANOW, &raw);
  g_raw = true;
  atexit(RestoreTerminal);
  signal(SIGINT, [](int) { exit(0); });
  signal(SIGTERM, [](int) { exit(0); });
  fputs("\033[?25l", stdout);
  for (;;) {
    pollfd in{STDIN_FILENO, POLLIN, 0};
    if (poll(&in, 1, static_cast<int>(interval * 1000)) > 0) {
      char key = 0;
      if (read(STDIN_FILENO, &key, 1) == 1) {
        if (key == 'q' || key == 'Q') break;
        if (key == 's')
          sort = sort == SortKey::kRate  ? SortKey::kP99
                 : sort == SortKey::kP99 ? SortKey::kName
                                         : SortKey::kRate;
        if (key == '+') interval = std::min(60.0, interval * 2);
        if (key == '-') interval = std::max(0.25, interval / 2);
      }
    }
    if (TakeSample(**client, &now)) {
      fputs("\033[H\033[2Jmarutop: the server does not answer; retrying...\n", stdout);
      fflush(stdout);
      continue;
    }
    winsize ws{};
    ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws);
    int height = ws.ws_row ? ws.ws_row : 24;
    std::string screen = "\033[H\033[2J";
    for (const auto &l : Render(server, now, before, sort, height - 1)) screen += l + "\n";
    screen += "q quit  s sort  +/- interval (" + std::to_string(interval).substr(0, 4) + "s)";
    fputs(screen.c_str(), stdout);
    fflush(stdout);
    before = now;
  }
  RestoreTerminal();
  return 0;
}
