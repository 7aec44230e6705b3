// Path rules on arbitrary bytes: every door (library, mount, tools) splits
// client paths with them.
#include <string>
#include <string_view>
#include <vector>

#include "util/path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace maru;
  std::string_view path(reinterpret_cast<const char *>(data), size);
  Result<std::vector<std::string>> parts = SplitPath(path);
  std::vector<std::string_view> views;
  Status viewed = SplitPathViews(path, &views);
  if (parts.ok() != viewed.ok()) __builtin_trap();
  if (!parts.ok()) {
    if (parts.status().errnum() != viewed.errnum()) __builtin_trap();
    return 0;
  }
  if (parts->size() != views.size()) __builtin_trap();
  for (size_t i = 0; i < parts->size(); ++i) {
    const std::string &name = (*parts)[i];
    if (name != views[i] || !ValidateName(name).ok()) __builtin_trap();
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos || name.size() > kMaxNameLength)
      __builtin_trap();
  }
  // The canonical form splits back to the same components.
  Result<std::vector<std::string>> again = SplitPath(JoinPath(*parts));
  if (!again.ok() || *again != *parts) __builtin_trap();
  return 0;
}
