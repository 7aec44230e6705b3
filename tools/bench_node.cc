#include "bench_node.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

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
  fprintf(stderr, "cannot run %s: %s\n", args[0], strerror(errno));
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
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
    started_.erase(it);
    return;
  }
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
  for (int i = 0; i < seconds * 20; ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string LastJson(const std::string &out) {
  size_t at = out.rfind("\n{");
  if (at != std::string::npos) return out.substr(at + 1);
  return out.rfind('{', 0) == 0 ? out : "";
}

double Field(const std::string &json, const std::string &name, size_t from) {
  size_t at = json.find("\"" + name + "\":", from);
  if (at == std::string::npos) return std::nan("");
  return strtod(json.c_str() + at + name.size() + 3, nullptr);
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
  const std::string b = SectionBegin(name), e = SectionEnd(name) + "\n";
  size_t begin = text.find(b), end = text.find(e);
  if (begin != std::string::npos && end != std::string::npos && end > begin)
    text.replace(begin, end + e.size() - begin, section);
  else
    text += (text.empty() ? "" : "\n") + section;
  std::ofstream out(doc);
  out << text;
  return out.good();
}

Node::Node(std::string work, Processes *procs) : work_(std::move(work)), procs_(procs) {
  pool_ = "/dev/shm/maru-bench-" + std::to_string(getpid()) + ".pool";
  socket_ = work_ + "/maru.sock";
  db_ = work_ + "/db";
  mnt_ = work_ + "/mnt";
}

bool Node::Format(uint64_t size, uint64_t unit, std::string *error) {
  std::vector<std::string> args{Sibling("maructl", "tools"),      "mkpool",  pool_,       "--size",
                                std::to_string(size >> 20) + "M", "--label", "maru-bench"};
  if (unit) args.insert(args.end(), {"--unit", std::to_string(unit >> 10) + "K"});
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
  if (WaitUntil(
          [&] {
            return Processes::Run({Sibling("maructl", "tools"), "df", "--server", address()},
                                  &out) == 0;
          },
          600))
    return true;
  *error = "maru-server did not start; see " + work_ + "/server.log";
  return false;
}

void Node::StopServer() {
  if (server_ > 0) procs_->Stop(server_);
  server_ = -1;
}

bool Node::Mount(std::string *error) {
  mkdir(mnt_.c_str(), 0755);
  mounted_ = Processes::Run({Sibling("maru-fuse", "src/fs"), address(), mnt_}, error) == 0;
  return mounted_;
}

void Node::Stop() {
  std::string out;
  if (mounted_) Processes::Run({"fusermount3", "-u", mnt_}, &out);
  mounted_ = false;
  StopServer();
  unlink(pool_.c_str());
}

}  // namespace maru::bench
