#include "units.h"

#include <cctype>
#include <cstdio>

namespace maru {

Result<uint64_t> ParseSize(std::string_view text) {
  size_t i = 0;
  uint64_t value = 0;
  if (text.empty() || !isdigit(static_cast<unsigned char>(text[0])))
    return Status::Error(EINVAL, "size must start with a digit");
  while (i < text.size() && isdigit(static_cast<unsigned char>(text[i]))) {
    uint64_t digit = text[i] - '0';
    if (value > (UINT64_MAX - digit) / 10) return Status::Error(ERANGE, "size too large");
    value = value * 10 + digit;
    ++i;
  }
  std::string_view suffix = text.substr(i);
  int shift = 0;
  if (!suffix.empty()) {
    switch (toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      case 'B':
        shift = -1;
        break;
      default:
        return Status::Error(EINVAL, "unknown size suffix '" + std::string(suffix) + "'");
    }
    suffix.remove_prefix(1);
    if (shift < 0) {
      shift = 0;
      if (!suffix.empty()) return Status::Error(EINVAL, "unknown size suffix");
    } else if (!suffix.empty() && suffix != "B" && suffix != "iB" && suffix != "b") {
      return Status::Error(EINVAL, "unknown size suffix");
    }
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) return Status::Error(ERANGE, "size too large");
  return value << shift;
}

std::string FormatSize(uint64_t bytes) {
  static constexpr const char *kUnits[] = {"", "K", "M", "G", "T", "P"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0 || v >= 100 || v == static_cast<uint64_t>(v))
    snprintf(buf, sizeof(buf), "%.0f%s", v, kUnits[u]);
  else
    snprintf(buf, sizeof(buf), "%.1f%s", v, kUnits[u]);
  return buf;
}

}  // namespace maru
