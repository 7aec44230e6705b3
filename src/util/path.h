// The namespace's path rules, shared by the server and every client so that a
// bad path fails the same way whichever door it came through.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "status.h"

namespace maru {

constexpr size_t kMaxNameLength = 255;
constexpr size_t kMaxPathLength = 4095;

// Checks one path component: not empty, not "." or "..", no '/' or NUL,
// at most 255 bytes (ENAMETOOLONG); everything else (LMCache keys with
// '@', '%', '.', '-') is a valid name.
Status ValidateName(std::string_view name);

// Splits an absolute path into validated components. "/" yields none.
// Relative or empty paths and "." / ".." components are EINVAL; repeated
// and trailing slashes are tolerated as POSIX does.
Result<std::vector<std::string>> SplitPath(std::string_view path);
// The same without copying: the views point into `path`.
Status SplitPathViews(std::string_view path, std::vector<std::string_view> *out);

// The checks of SplitPathViews without the components: their number in
// `*names`, and in `*canonical` (if not null) whether `path` names at
// least one and is already what JoinPath would make of them (no repeated
// or trailing slash).
Status CheckPathNames(std::string_view path, size_t *names, bool *canonical);

// Joins components back into the canonical absolute path.
std::string JoinPath(const std::vector<std::string> &components);

}  // namespace maru
