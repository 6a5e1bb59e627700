// Small helpers for JSON read from files and peers (nlohmann-json).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace laminar {

// A short description of `v` for an error message, never recursive (a value nested 10^5 deep
// must not overflow the stack) and never longer than ~80 characters: scalars as JSON text,
// containers as "an array of N elements" / "an object with N keys".
inline std::string JsonSnippet(const nlohmann::json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " elements";
  if (v.is_object()) return "an object with " + std::to_string(v.size()) + " keys";
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

}  // namespace laminar
