// The tools' --json output, written with nlohmann::json: one line of valid
// JSON whatever bytes a name holds and whatever a figure came out as.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace maru {

// Fields stay in the order they are set, as the man pages list them.
using Json = nlohmann::ordered_json;

// `j` on one line. UTF-8 is written as it is; each byte that is not part of
// valid UTF-8 (names are bytes, not text) becomes U+FFFD; NaN and ±infinity
// become null. Never throws.
std::string JsonLine(const Json &j);
// JsonLine(j) and a newline on standard output.
void PrintJson(const Json &j);
// `v` rounded to `decimals` decimal places, so that a figure prints as
// briefly as it was measured; NaN and ±infinity stay as they are.
double Rounded(double v, int decimals);

}  // namespace maru
