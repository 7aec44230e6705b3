// The tools' --json writer: whatever bytes a name holds and whatever a
// figure came out as, the line is JSON a strict parser accepts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/json_output.h"

namespace maru {
namespace {

// Parses strictly (throws on anything that is not JSON, invalid UTF-8 too).
nlohmann::json Reparse(const std::string &line) {
  return nlohmann::json::parse(line);
}

TEST(JsonOutput, ValidUtf8AboveAsciiIsWrittenAsItIs) {
  const std::string name = "/kv/caf\xc3\xa9/\xe2\x82\xac\xf0\x9f\x98\x80";
  const std::string line = JsonLine(Json{{"path", name}});
  EXPECT_NE(line.find(name), std::string::npos) << line;
  EXPECT_EQ(Reparse(line)["path"], name);
}

TEST(JsonOutput, InvalidUtf8BecomesReplacementCharacters) {
  // 0xff never occurs in UTF-8; 0xc3 alone is a truncated sequence.
  const std::string line = JsonLine(Json{{"path", std::string("/kv/a\xff"
                                                              "b\xc3")}});
  EXPECT_EQ(Reparse(line)["path"],
            "/kv/a\xef\xbf\xbd"
            "b\xef\xbf\xbd");
}

TEST(JsonOutput, ControlCharactersAndQuotesAreEscaped) {
  const std::string name = std::string("a\"b\\c\nd\x01", 8);
  const std::string line = JsonLine(Json{{"path", name}});
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(Reparse(line)["path"], name);
}

TEST(JsonOutput, NonFiniteFiguresBecomeNull) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::string line = JsonLine(Json{{"nan", std::nan("")},
                                         {"inf", inf},
                                         {"minus_inf", -inf},
                                         {"ratio", Rounded(1.0 / 0.0, 3)},
                                         {"rounded_nan", Rounded(std::nan(""), 3)}});
  EXPECT_EQ(line,
            "{\"nan\":null,\"inf\":null,\"minus_inf\":null,\"ratio\":null,\"rounded_nan\":null}");
  EXPECT_TRUE(Reparse(line)["nan"].is_null());
}

TEST(JsonOutput, FieldsKeepTheirOrderAndFiguresTheirPrecision) {
  const std::string line =
      JsonLine(Json{{"zeta", 1}, {"alpha", Rounded(2.34567, 3)}, {"big", UINT64_MAX}});
  EXPECT_EQ(line, "{\"zeta\":1,\"alpha\":2.346,\"big\":18446744073709551615}");
}

}  // namespace
}  // namespace maru
