#include "util/flags.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "util/units.h"

namespace maru {
namespace {

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

Flags::Flags(std::string usage, std::string summary)
    : usage_(std::move(usage)), summary_(std::move(summary)) {}

void Flags::Add(Flag flag) {
  flags_.push_back(std::move(flag));
}

void Flags::String(const std::string &name, std::string *out, const std::string &help) {
  Add({name, help, out->empty() ? "" : *out, true, false, [out](std::string_view v) {
         *out = std::string(v);
         return Status::Ok();
       }});
}

void Flags::Strings(const std::string &name, std::vector<std::string> *out,
                    const std::string &help) {
  Add({name, help, "", true, false, [out](std::string_view v) {
         out->emplace_back(v);
         return Status::Ok();
       }});
}

void Flags::Bool(const std::string &name, bool *out, const std::string &help) {
  Add({name, help, "", false, false, [out, name](std::string_view v) {
         if (v.empty() || v == "1" || v == "true" || v == "yes")
           *out = true;
         else if (v == "0" || v == "false" || v == "no")
           *out = false;
         else
           return Status::Error(EINVAL, "--" + name + " takes true or false");
         return Status::Ok();
       }});
}

void Flags::Int(const std::string &name, int64_t *out, const std::string &help) {
  Add({name, help, std::to_string(*out), true, false, [out, name](std::string_view v) {
         std::string s(v);
         char *end = nullptr;
         long long n = strtoll(s.c_str(), &end, 10);
         if (s.empty() || *end) return Status::Error(EINVAL, "--" + name + " takes an integer");
         *out = n;
         return Status::Ok();
       }});
}

void Flags::Double(const std::string &name, double *out, const std::string &help) {
  std::ostringstream d;
  d << *out;
  Add({name, help, d.str(), true, false, [out, name](std::string_view v) {
         std::string s(v);
         char *end = nullptr;
         double n = strtod(s.c_str(), &end);
         if (s.empty() || *end) return Status::Error(EINVAL, "--" + name + " takes a number");
         *out = n;
         return Status::Ok();
       }});
}

void Flags::Size(const std::string &name, uint64_t *out, const std::string &help) {
  Add({name, help, *out ? FormatSize(*out) : "", true, false, [out, name](std::string_view v) {
         Result<uint64_t> size = ParseSize(v);
         if (!size.ok()) return Status::Error(EINVAL, "--" + name + ": " + size.status().message());
         *out = *size;
         return Status::Ok();
       }});
}

Flags::Flag *Flags::Find(std::string_view name) {
  for (Flag &f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

Status Flags::Apply(Flag *flag, std::string_view value) {
  flag->set = true;
  return flag->apply(value);
}

Status Flags::Parse(int argc, char **argv, int first, std::vector<std::string> *positional) {
  for (int i = first; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg == "--") {
      for (++i; i < argc; ++i) positional->emplace_back(argv[i]);
      break;
    }
    if (!arg.starts_with("--")) {
      positional->emplace_back(arg);
      continue;
    }
    arg.remove_prefix(2);
    std::string_view name = arg, value;
    bool inline_value = false;
    if (size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    Flag *flag = Find(name);
    if (!flag)
      return Status::Error(EINVAL, "unknown option --" + std::string(name) + " (see --help)");
    if (flag->takes_value && !inline_value) {
      if (i + 1 >= argc) return Status::Error(EINVAL, "--" + std::string(name) + " needs a value");
      value = argv[++i];
    }
    MARU_RETURN_IF_ERROR(Apply(flag, value));
  }
  return Status::Ok();
}

Status Flags::ParseConfigFile(const std::string &path) {
  std::ifstream in(path);
  if (!in) return Status::Error(errno ? errno : ENOENT, "cannot read " + path);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::string text = Trim(line.substr(0, line.find('#')));
    if (text.empty()) continue;
    size_t eq = text.find('=');
    std::string name = Trim(text.substr(0, eq));
    std::string value = eq == std::string::npos ? "" : Trim(text.substr(eq + 1));
    Flag *flag = Find(name);
    std::string where = path + ":" + std::to_string(lineno);
    if (!flag) return Status::Error(EINVAL, where + ": unknown setting '" + name + "'");
    if (flag->set) continue;  // the command line wins
    Status s = flag->apply(value);
    if (!s.ok()) return Status::Error(s.errnum(), where + ": " + s.message());
  }
  return Status::Ok();
}

std::string Flags::Help() const {
  std::string out = "Usage: " + usage_ + "\n" + summary_ + "\n\nOptions:\n";
  for (const Flag &f : flags_) {
    std::string left = "  --" + f.name + (f.takes_value ? " VALUE" : "");
    out += left;
    out += left.size() < 26 ? std::string(26 - left.size(), ' ') : "\n" + std::string(26, ' ');
    out += f.help;
    if (!f.default_text.empty()) out += " (default: " + f.default_text + ")";
    out += "\n";
  }
  out += "  --help                  show this help and exit\n";
  return out;
}

}  // namespace maru
