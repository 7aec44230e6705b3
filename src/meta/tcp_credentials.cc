#include "meta/tcp_credentials.h"

#include <grpcpp/security/server_credentials.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace maru {
namespace {

Result<std::string> ReadWhole(const std::string &path) {
  std::ifstream in(path);
  if (!in) return Status::Error(errno ? errno : EIO, "cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "UID[:GID]"; the gid is the uid's number when omitted.
Result<MappedId> ParseIds(const std::string &text) {
  MappedId id;
  char *end = nullptr;
  errno = 0;
  unsigned long uid = strtoul(text.c_str(), &end, 10);
  if (end == text.c_str() || errno || uid > UINT32_MAX)
    return Status::Error(EINVAL, "bad uid in '" + text + "'");
  id.uid = id.gid = static_cast<uint32_t>(uid);
  if (*end == ':') {
    const char *gid_text = end + 1;
    unsigned long gid = strtoul(gid_text, &end, 10);
    if (end == gid_text || errno || gid > UINT32_MAX)
      return Status::Error(EINVAL, "bad gid in '" + text + "'");
    id.gid = static_cast<uint32_t>(gid);
  }
  if (*end) return Status::Error(EINVAL, "expected UID[:GID], not '" + text + "'");
  return id;
}

// Lines without comments ('#') and blank lines.
std::vector<std::string> Lines(const std::string &text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") + 1 - first);
    out.push_back(line);
  }
  return out;
}

}  // namespace

Status AddIdentityMapping(const std::string &line, IdentityPolicy *policy) {
  const size_t eq = line.rfind('=');
  const std::string name = eq == std::string::npos ? "" : line.substr(0, eq);
  if (!(name.starts_with("CN=") || name.starts_with("SAN=")) || name.find('=') + 1 == name.size())
    return Status::Error(
        EINVAL, "a TLS identity is CN=NAME=UID[:GID] or SAN=NAME=UID[:GID], not '" + line + "'");
  Result<MappedId> id = ParseIds(line.substr(eq + 1));
  if (!id.ok()) return id.status();
  policy->certs[name] = *id;
  return Status::Ok();
}

Result<std::string> ReadSecretFile(const std::string &what, const std::string &path) {
  struct stat st;
  if (stat(path.c_str(), &st) < 0) return Status::Error(errno, "cannot stat " + what + " " + path);
  if (!S_ISREG(st.st_mode)) return Status::Error(EINVAL, what + " " + path + " is not a file");
  if ((st.st_mode & 077) != 0 || (st.st_uid != 0 && st.st_uid != geteuid())) {
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", st.st_mode & 07777);
    return Status::Error(EPERM, what + " " + path + " has mode " + mode + " owned by uid " +
                                    std::to_string(st.st_uid) +
                                    ": it must be 0600 or 0400 and owned by root or the server's "
                                    "user (chmod 600 " +
                                    path + ")");
  }
  return ReadWhole(path);
}

Status LoadTokenFile(const std::string &path, IdentityPolicy *policy) {
  Result<std::string> text = ReadSecretFile("token file", path);
  if (!text.ok()) return text.status();
  for (const std::string &line : Lines(*text)) {
    const size_t space = line.find_first_of(" \t");
    if (space == std::string::npos)
      return Status::Error(EINVAL, "token file " + path + ": expected 'TOKEN UID[:GID]' lines");
    Result<MappedId> id = ParseIds(line.substr(line.find_first_not_of(" \t", space)));
    if (!id.ok()) return Status::Error(EINVAL, "token file " + path + ": " + id.status().message());
    policy->tokens[line.substr(0, space)] = *id;
  }
  return Status::Ok();
}

Result<IdentityPolicy> LoadIdentityPolicy(const TcpAuthConfig &config) {
  IdentityPolicy policy;
  for (const std::string &line : config.tls_identities)
    MARU_RETURN_IF_ERROR(AddIdentityMapping(line, &policy));
  if (!config.tls_identity_map.empty()) {
    Result<std::string> text = ReadWhole(config.tls_identity_map);
    if (!text.ok()) return text.status();
    for (const std::string &line : Lines(*text))
      MARU_RETURN_IF_ERROR(AddIdentityMapping(line, &policy));
  }
  if (!config.token_file.empty()) MARU_RETURN_IF_ERROR(LoadTokenFile(config.token_file, &policy));
  return policy;
}

Result<std::shared_ptr<grpc::ServerCredentials>> TcpServerCredentials(const TcpAuthConfig &config) {
  const int given =
      !config.tls_cert.empty() + !config.tls_key.empty() + !config.tls_client_ca.empty();
  if (given == 0) return grpc::InsecureServerCredentials();
  if (given != 3)
    return Status::Error(EINVAL, "mutual TLS needs --tls-cert, --tls-key and --tls-client-ca");
  Result<std::string> cert = ReadWhole(config.tls_cert);
  if (!cert.ok()) return cert.status();
  Result<std::string> key = ReadWhole(config.tls_key);
  if (!key.ok()) return key.status();
  Result<std::string> ca = ReadWhole(config.tls_client_ca);
  if (!ca.ok()) return ca.status();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = *ca;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

}  // namespace maru
