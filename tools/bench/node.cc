#include "bench/node.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include "util/clock.h"

namespace maru::bench {
namespace {

bool Executable(const std::string &p) {
  return access(p.c_str(), X_OK) == 0;
}

[[noreturn]] void Exec(const std::vector<std::string> &argv, const std::vector<std::string> &env) {
  for (const std::string &e : env) putenv(strdup(e.c_str()));
  std::vector<char *> args;
  for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  fprintf(stderr, "maru-bench: cannot run %s: %s\n", args[0], strerror(errno));
  _exit(127);
}

}  // namespace

std::string Sibling(const std::string &name, const std::string &build_subdir) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : ".";
  dir = dir.substr(0, dir.rfind('/'));
  for (const std::string &p :
       {dir + "/" + name, dir + "/../" + build_subdir + "/" + name, dir + "/../sbin/" + name})
    if (Executable(p)) return p;
  return name;  // from PATH
}

std::string FromPath(const std::string &name) {
  for (const char *d : {"/usr/bin/", "/usr/sbin/", "/usr/local/bin/", "/bin/"})
    if (Executable(d + name)) return d + name;
  return "";
}

pid_t Processes::Start(const std::vector<std::string> &argv, const std::string &log,
                       const std::vector<std::string> &env) {
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a benchmark killed leaves no daemon behind
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    Exec(argv, env);
  }
  if (pid > 0) started_.push_back(pid);
  return pid;
}

void Processes::Stop(pid_t pid) {
  for (auto it = started_.begin(); it != started_.end(); ++it) {
    if (*it != pid) continue;
    started_.erase(it);
    kill(pid, SIGTERM);
    // A daemon gets 10 s to shut down cleanly, then it is killed.
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pid, nullptr, WNOHANG) == pid) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return;
  }
}

bool Processes::Exited(pid_t pid) {
  for (auto it = started_.begin(); it != started_.end(); ++it) {
    if (*it != pid) continue;
    if (waitpid(pid, nullptr, WNOHANG) != pid) return false;
    started_.erase(it);  // reaped: its pid may be reused, never signal it again
    return true;
  }
  return true;
}

void Processes::StopAll() {
  while (!started_.empty()) Stop(started_.back());
}

int Processes::Run(const std::vector<std::string> &argv, std::string *out,
                   const std::vector<std::string> &env) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) return -1;
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    Exec(argv, env);
  }
  close(pipefd[1]);
  out->clear();
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) out->append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

bool WaitUntil(const std::function<bool()> &ready, int seconds) {
  const int64_t deadline = DeadlineAfterMs(int64_t{seconds} * 1000);
  while (!DeadlinePassed(deadline)) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ready();
}

std::string LastJson(const std::string &out) {
  size_t at = out.rfind("\n{");
  if (at != std::string::npos) return out.substr(at + 1);
  return out.rfind('{', 0) == 0 ? out : "";
}

double Field(const std::string &json, const std::string &pointer) {
  const double none = std::nan("");
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return none;
  try {
    const nlohmann::json &v = j.at(nlohmann::json::json_pointer(pointer));
    return v.is_number() ? v.get<double>() : none;
  } catch (const nlohmann::json::exception &) {  // no such field, or a bad pointer
    return none;
  }
}

std::string Fmt(const char *format, double v) {
  if (std::isnan(v) || std::isinf(v)) return "–";
  char buf[64];
  snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string SectionBegin(const std::string &name) {
  return "<!-- maru-bench " + name + ": begin -->";
}

std::string SectionEnd(const std::string &name) {
  return "<!-- maru-bench " + name + ": end -->";
}

bool WriteSection(const std::string &doc, const std::string &name, const std::string &section) {
  std::string text;
  {
    std::ifstream in(doc);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  const std::string b = SectionBegin(name), e = SectionEnd(name);
  const size_t begin = text.find(b);
  size_t end = begin == std::string::npos ? begin : text.find(e, begin);
  if (end != std::string::npos) {
    end += e.size();
    if (end < text.size() && text[end] == '\n') ++end;
    text.replace(begin, end - begin, section);
  } else
    text += (text.empty() ? "" : "\n") + section;
  std::ofstream out(doc);
  out << text;
  return out.good();
}

Node::Node(std::string work, Processes *procs, const std::string &tag)
    : work_(std::move(work)), procs_(procs) {
  pool_ =
      "/dev/shm/maru-bench-" + std::to_string(getpid()) + (tag.empty() ? "" : "-" + tag) + ".pool";
  socket_ = work_ + "/maru.sock";
  db_ = work_ + "/db";
  mnt_ = work_ + "/mnt";
}

bool Node::Format(uint64_t size, uint64_t unit, std::string *error, bool sparse,
                  const std::string &coherence) {
  std::vector<std::string> args{Sibling("maructl", "tools"),      "mkpool",  pool_,       "--size",
                                std::to_string(size >> 20) + "M", "--label", "maru-bench"};
  if (unit) args.insert(args.end(), {"--unit", std::to_string(unit >> 10) + "K"});
  if (sparse) args.push_back("--sparse");
  if (!coherence.empty()) args.insert(args.end(), {"--coherence", coherence});
  return Processes::Run(args, error) == 0;
}

bool Node::StartServer(const std::vector<std::string> &flags, std::string *error) {
  std::vector<std::string> args{Sibling("maru-server", "src/meta"),
                                "--pool",
                                pool_,
                                "--db",
                                db_,
                                "--listen",
                                address(),
                                "--log-level",
                                "warn"};
  args.insert(args.end(), flags.begin(), flags.end());
  server_ = procs_->Start(args, work_ + "/server.log");
  std::string out;
  bool exited = false;
  // A big namespace takes a while to load (ten million chunks on a loaded
  // host: minutes); a server that exits is not waited for. Asked for the
  // root's attributes: `df` would add its walk of every inode (its table of
  // top-level directories, most of a second at ten million) to the start.
  const bool up = WaitUntil(
      [&] {
        exited = procs_->Exited(server_);
        return exited ||
               Processes::Run({Sibling("maructl", "tools"), "stat", "/", "--server", address()},
                              &out) == 0;
      },
      1800);
  if (up && !exited) {
    RegisterCleanup();
    return true;
  }
  std::ifstream log(work_ + "/server.log");
  std::string last, line;
  while (std::getline(log, line))
    if (!line.empty()) last = line;
  *error = "maru-server did not start: " + last;
  if (!exited) StopServer();
  server_ = -1;
  return false;
}

void Node::StopServer() {
  if (server_ > 0) procs_->Stop(server_);
  server_ = -1;
}

bool Node::Mount(std::string *error) {
  mkdir(mnt_.c_str(), 0755);
  mounted_ = Processes::Run({Sibling("maru-fuse", "src/fs"), address(), mnt_}, error) == 0;
  RegisterCleanup();
  return mounted_;
}

void Node::Stop() {
  std::string out;
  if (mounted_ && Processes::Run({"fusermount3", "-u", mnt_}, &out) != 0)
    Processes::Run({"fusermount3", "-uz", mnt_}, &out);  // busy: detach it
  mounted_ = false;
  StopServer();
  unlink(pool_.c_str());
  cleanup_pool[0] = cleanup_mount[0] = '\0';
}

// A benchmark stopped by a signal (a test's timeout, ^C) still unmounts and
// removes its pool; the daemons die with it (PR_SET_PDEATHSIG).
char Node::cleanup_pool[256];
char Node::cleanup_mount[256];
char Node::cleanup_dirs[2][256];

namespace {

// Async-signal-safe: fork and execve only.
void RunInHandler(const char *path, const char *arg1, const char *arg2) {
  pid_t pid = fork();
  if (pid == 0) {
    const char *argv[] = {path, arg1, arg2, nullptr};
    const char *envp[] = {"PATH=/usr/bin:/bin", nullptr};
    execve(path, const_cast<char **>(argv), const_cast<char **>(envp));
    _exit(127);
  }
  if (pid > 0) waitpid(pid, nullptr, 0);
}

}  // namespace

void Node::RemoveOnSignal(const std::string &dir) {
  for (char *slot : cleanup_dirs)
    if (!slot[0]) {
      snprintf(slot, sizeof(cleanup_dirs[0]), "%s", dir.c_str());
      return;
    }
}

void Node::OnSignal(int sig) {
  if (cleanup_mount[0]) RunInHandler("/bin/fusermount3", "-uz", cleanup_mount);
  if (cleanup_pool[0]) unlink(cleanup_pool);
  for (const char *dir : cleanup_dirs)
    if (dir[0]) RunInHandler("/bin/rm", "-rf", dir);
  signal(sig, SIG_DFL);
  raise(sig);
}

void Node::RegisterCleanup() {
  snprintf(cleanup_pool, sizeof(cleanup_pool), "%s", pool_.c_str());
  if (mounted_) snprintf(cleanup_mount, sizeof(cleanup_mount), "%s", mnt_.c_str());
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGHUP, OnSignal);
}

}  // namespace maru::bench
