// A small JSON writer for the tools' --json output: one line, valid JSON.
#pragma once

#include <cinttypes>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

namespace maru {

class JsonWriter {
 public:
  // An object as a value (top level, or an element of an array).
  void Begin() { Open('{'); }
  void End() { Close('}'); }
  // A top-level array.
  void BeginArrayValue() { Open('['); }
  void EndArrayValue() { Close(']'); }
  // An array or object as the field `name` of the current object.
  void BeginArray(const std::string &name) { Key(name), Push('['); }
  void EndArray() { Close(']'); }
  void BeginObject(const std::string &name) { Key(name), Push('{'); }
  void EndObject() { Close('}'); }

  void Field(const std::string &name, const std::string &v) { Key(name), out_ += Quote(v); }
  void Field(const std::string &name, const char *v) { Field(name, std::string(v)); }
  void Field(const std::string &name, bool v) { Key(name), out_ += v ? "true" : "false"; }
  void Field(const std::string &name, double v) {
    Key(name);
    char buf[64];
    snprintf(buf, sizeof(buf), "%.6g", v);
    out_ += buf;
  }
  template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
  void Field(const std::string &name, T v) {
    Key(name), out_ += std::to_string(v);
  }
  // An element of the current array.
  void Value(const std::string &v) { Comma(), out_ += Quote(v); }

  const std::string &str() const { return out_; }

  static std::string Escape(const std::string &s) {
    std::string out;
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20) {
        char buf[8];
        snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
    return out;
  }

 private:
  static std::string Quote(const std::string &s) { return "\"" + Escape(s) + "\""; }
  void Comma() {
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  void Key(const std::string &name) {
    Comma();
    out_ += Quote(name) + ":";
  }
  void Open(char c) {
    Comma();
    Push(c);
  }
  void Push(char c) {
    out_ += c;
    first_.push_back(true);
  }
  void Close(char c) {
    out_ += c;
    first_.pop_back();
  }

  std::string out_;
  std::vector<bool> first_;
};

}  // namespace maru
