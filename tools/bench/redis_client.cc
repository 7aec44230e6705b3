#include "bench/redis_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace maru::bench {

RedisClient::~RedisClient() {
  close(fd_);
}

Result<RedisClient *> RedisClient::Connect(const std::string &host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0)
    return Status::Error(EHOSTUNREACH, "cannot resolve " + host);
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : connect(fd, res->ai_addr, res->ai_addrlen);
  const int err = errno;
  freeaddrinfo(res);
  if (rc < 0) {
    if (fd >= 0) close(fd);
    return Status::Error(err, "cannot connect to redis on port " + std::to_string(port));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // A peer that stops answering (or is not Redis) must not hang a benchmark.
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  auto *c = new RedisClient(fd);
  c->in_.resize(1 << 20);
  return c;
}

void RedisClient::Append(const std::vector<std::pair<const void *, uint64_t>> &args) {
  out_ += "*" + std::to_string(args.size()) + "\r\n";
  for (const auto &[data, len] : args) {
    out_ += "$" + std::to_string(len) + "\r\n";
    out_.append(static_cast<const char *>(data), len);
    out_ += "\r\n";
  }
}

Status RedisClient::Flush() {
  size_t at = 0;
  while (at < out_.size()) {
    ssize_t n = send(fd_, out_.data() + at, out_.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error(errno ? errno : EPIPE, "redis: send");
    at += static_cast<size_t>(n);
  }
  out_.clear();
  return Status::Ok();
}

Status RedisClient::ReadExact(void *dst, uint64_t len) {
  auto *p = static_cast<char *>(dst);
  while (len > 0) {
    if (in_pos_ < in_len_) {
      const uint64_t take = std::min<uint64_t>(len, in_len_ - in_pos_);
      if (p) memcpy(p, in_.data() + in_pos_, take), p += take;
      in_pos_ += take;
      len -= take;
      continue;
    }
    if (p && len >= in_.size()) {  // large values go straight to their buffer
      ssize_t n = recv(fd_, p, len, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status::Error(n == 0 ? ECONNRESET : errno, "redis: recv");
      p += n;
      len -= static_cast<uint64_t>(n);
      continue;
    }
    ssize_t n = recv(fd_, in_.data(), in_.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error(n == 0 ? ECONNRESET : errno, "redis: recv");
    in_pos_ = 0;
    in_len_ = static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status RedisClient::ReadLine(std::string *line) {
  line->clear();
  for (;;) {
    char c;
    MARU_RETURN_IF_ERROR(ReadExact(&c, 1));
    if (c == '\n' && !line->empty() && line->back() == '\r') {
      line->pop_back();
      return Status::Ok();
    }
    line->push_back(c);
  }
}

Status RedisClient::ReadReply(std::string *bulk, bool *nil, int64_t *integer) {
  std::string line;
  MARU_RETURN_IF_ERROR(ReadLine(&line));
  if (line.empty()) return Status::Error(EPROTO, "redis: empty reply");
  if (nil) *nil = false;
  switch (line[0]) {
    case '+':
      return Status::Ok();
    case '-':
      return Status::Error(EIO, "redis: " + line.substr(1));
    case ':':
      if (integer) *integer = strtoll(line.c_str() + 1, nullptr, 10);
      return Status::Ok();
    case '$': {
      const int64_t len = strtoll(line.c_str() + 1, nullptr, 10);
      if (len < 0) {
        if (nil) *nil = true;
        return Status::Ok();
      }
      std::string ignored;
      std::string *dst = bulk ? bulk : &ignored;
      dst->resize(static_cast<size_t>(len));
      MARU_RETURN_IF_ERROR(ReadExact(dst->data(), static_cast<uint64_t>(len)));
      char crlf[2];
      return ReadExact(crlf, 2);
    }
    default:
      return Status::Error(EPROTO, "redis: unexpected reply '" + line + "'");
  }
}

Status RedisClient::Set(const std::string &key, const void *data, uint64_t len) {
  Append({{"SET", 3}, {key.data(), key.size()}, {data, len}});
  MARU_RETURN_IF_ERROR(Flush());
  return ReadReply(nullptr, nullptr, nullptr);
}

Status RedisClient::Get(const std::string &key, std::string *out) {
  Append({{"GET", 3}, {key.data(), key.size()}});
  MARU_RETURN_IF_ERROR(Flush());
  bool nil = false;
  MARU_RETURN_IF_ERROR(ReadReply(out, &nil, nullptr));
  return nil ? Status::Error(ENOENT, key) : Status::Ok();
}

Status RedisClient::Exists(const std::vector<std::string> &keys, std::vector<bool> *found) {
  for (const std::string &k : keys) Append({{"EXISTS", 6}, {k.data(), k.size()}});
  MARU_RETURN_IF_ERROR(Flush());
  found->assign(keys.size(), false);
  Status first;  // every reply is read, so the next call gets its own
  for (size_t i = 0; i < keys.size(); ++i) {
    int64_t n = 0;
    Status s = ReadReply(nullptr, nullptr, &n);
    if (!s.ok() && s.errnum() != EIO) return s;  // the connection is broken
    if (first.ok()) first = s;
    (*found)[i] = s.ok() && n > 0;
  }
  return first;
}

Status RedisClient::MGet(const std::vector<std::string> &keys, std::vector<std::string> *values,
                         std::vector<bool> *found) {
  std::vector<std::pair<const void *, uint64_t>> args{{"MGET", 4}};
  for (const std::string &k : keys) args.emplace_back(k.data(), k.size());
  Append(args);
  MARU_RETURN_IF_ERROR(Flush());
  std::string line;
  MARU_RETURN_IF_ERROR(ReadLine(&line));
  if (line.empty() || line[0] != '*' ||
      strtoll(line.c_str() + 1, nullptr, 10) != static_cast<int64_t>(keys.size()))
    return Status::Error(EPROTO, "redis: MGET: " + line);
  values->resize(keys.size());
  found->assign(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    bool nil = false;
    MARU_RETURN_IF_ERROR(ReadReply(&(*values)[i], &nil, nullptr));
    (*found)[i] = !nil;
  }
  return Status::Ok();
}

Status RedisClient::Command(const std::vector<std::string> &args) {
  std::vector<std::pair<const void *, uint64_t>> a;
  for (const std::string &s : args) a.emplace_back(s.data(), s.size());
  Append(a);
  MARU_RETURN_IF_ERROR(Flush());
  return ReadReply(nullptr, nullptr, nullptr);
}

}  // namespace maru::bench
