#include "common/json_output.h"

#include <cmath>
#include <cstdio>

namespace maru {

std::string JsonLine(const Json &j) {
  // With the replace handler dump() has nothing left to throw for but
  // memory; keep even that inside the tool (and the line still JSON).
  try {
    return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  } catch (const std::exception &) {
    return "null";
  }
}

void PrintJson(const Json &j) {
  puts(JsonLine(j).c_str());
}

double Rounded(double v, int decimals) {
  if (!std::isfinite(v)) return v;
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

}  // namespace maru
