// Command-line flags for every Maru binary: "--name value", "--name=value",
// boolean "--name", repeatable flags, positional arguments, generated
// --help text, and a "name = value" configuration file that flags override.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace maru {

class Flags {
 public:
  // `usage` is the first help line, e.g. "maru-server [OPTIONS]".
  Flags(std::string usage, std::string summary);

  void String(const std::string &name, std::string *out, const std::string &help);
  void Strings(const std::string &name, std::vector<std::string> *out, const std::string &help);
  void Bool(const std::string &name, bool *out, const std::string &help);
  void Int(const std::string &name, int64_t *out, const std::string &help);
  void Double(const std::string &name, double *out, const std::string &help);
  // Sizes with K/M/G/T suffixes.
  void Size(const std::string &name, uint64_t *out, const std::string &help);

  // Parses argv[first..]; leaves non-flag arguments in `positional`.
  // "--help" sets help_requested(). Errors name the bad flag.
  Status Parse(int argc, char **argv, int first, std::vector<std::string> *positional);
  // Reads "name = value" lines ('#' comments) from `path`, for flags not
  // given on the command line. Call after Parse.
  Status ParseConfigFile(const std::string &path);

  bool help_requested() const { return help_; }
  std::string Help() const;

 private:
  struct Flag {
    std::string name, help, default_text;
    bool takes_value = true;
    bool set = false;
    std::function<Status(std::string_view)> apply;
  };
  void Add(Flag flag);
  Flag *Find(std::string_view name);
  Status Apply(Flag *flag, std::string_view value);

  std::string usage_, summary_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

}  // namespace maru
