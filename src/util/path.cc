#include "path.h"

#include <cstring>

namespace maru {

namespace {

// The checks of a name that need it whole: not empty, not "." or "..", not
// too long. Its bytes are checked as they are walked.
Status CheckNameShape(std::string_view name) {
  if (name.empty()) return Status::Error(EINVAL, "empty path component");
  if (name.size() <= 2 && name[0] == '.' && (name.size() == 1 || name[1] == '.'))
    return Status::Error(EINVAL, "'.' and '..' are not allowed");
  if (name.size() > kMaxNameLength)
    return Status::Error(ENAMETOOLONG, "path component longer than 255 bytes");
  return Status::Ok();
}

Status BadByte() {
  return Status::Error(EINVAL, "'/' or NUL in a name");
}

// SplitPathViews' walk: `each(name)` for each validated component. A pass
// of memchr (vectorised) for NUL, and one for each slash: a loop over the
// bytes cost a batched lookup as much as hashing its paths.
template <typename Each>
Status ForEachName(std::string_view path, Each &&each) {
  if (path.empty()) return Status::Error(EINVAL, "empty path");
  if (path.front() != '/') return Status::Error(EINVAL, "path must be absolute");
  if (path.size() > kMaxPathLength) return Status::Error(ENAMETOOLONG, "path too long");
  const char *const p = path.data();
  const void *nul = std::memchr(p, '\0', path.size());
  const size_t nul_at = nul ? static_cast<size_t>(static_cast<const char *>(nul) - p) : path.size();
  for (size_t start = 1; start < path.size();) {
    const void *slash = std::memchr(p + start, '/', path.size() - start);
    const size_t end =
        slash ? static_cast<size_t>(static_cast<const char *>(slash) - p) : path.size();
    if (end > start) {  // repeated and trailing slashes end no name
      const std::string_view name = path.substr(start, end - start);
      MARU_RETURN_IF_ERROR(CheckNameShape(name));  // first, as ValidateName checks
      if (nul_at < end) return BadByte();
      each(name);
    }
    start = end + 1;
  }
  return Status::Ok();
}

}  // namespace

Status ValidateName(std::string_view name) {
  MARU_RETURN_IF_ERROR(CheckNameShape(name));
  for (char c : name)
    if (c == '/' || c == '\0') return BadByte();
  return Status::Ok();
}

Status SplitPathViews(std::string_view path, std::vector<std::string_view> *out) {
  out->clear();
  return ForEachName(path, [out](std::string_view name) { out->push_back(name); });
}

Status CheckPathNames(std::string_view path, size_t *names, bool *canonical) {
  size_t n = 0, length = 0;
  MARU_RETURN_IF_ERROR(ForEachName(path, [&](std::string_view name) {
    ++n;
    length += 1 + name.size();
  }));
  *names = n;
  // The form JoinPath gives: one slash before each name and none after.
  if (canonical) *canonical = n > 0 && length == path.size();
  return Status::Ok();
}

Result<std::vector<std::string>> SplitPath(std::string_view path) {
  std::vector<std::string_view> views;
  MARU_RETURN_IF_ERROR(SplitPathViews(path, &views));
  return std::vector<std::string>(views.begin(), views.end());
}

std::string JoinPath(const std::vector<std::string> &components) {
  if (components.empty()) return "/";
  std::string out;
  for (const auto &c : components) {
    out += '/';
    out += c;
  }
  return out;
}

}  // namespace maru
