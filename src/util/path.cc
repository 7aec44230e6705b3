#include "path.h"

namespace maru {

Status ValidateName(std::string_view name) {
  if (name.empty()) return Status::Error(EINVAL, "empty path component");
  if (name == "." || name == "..") return Status::Error(EINVAL, "'.' and '..' are not allowed");
  if (name.size() > kMaxNameLength)
    return Status::Error(ENAMETOOLONG, "path component longer than 255 bytes");
  for (char c : name) {
    if (c == '/' || c == '\0') return Status::Error(EINVAL, "'/' or NUL in a name");
  }
  return Status::Ok();
}

namespace {

// SplitPathViews' walk: `each(name)` for each validated component.
template <typename Each>
Status ForEachName(std::string_view path, Each &&each) {
  if (path.empty()) return Status::Error(EINVAL, "empty path");
  if (path.front() != '/') return Status::Error(EINVAL, "path must be absolute");
  if (path.size() > kMaxPathLength) return Status::Error(ENAMETOOLONG, "path too long");
  size_t pos = 0;
  while (pos < path.size()) {
    while (pos < path.size() && path[pos] == '/') ++pos;
    if (pos == path.size()) break;
    size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    std::string_view name = path.substr(pos, end - pos);
    MARU_RETURN_IF_ERROR(ValidateName(name));
    each(name);
    pos = end;
  }
  return Status::Ok();
}

}  // namespace

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
