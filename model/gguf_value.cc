// GgufValue accessors and GgufFile's typed metadata getters.
#include <limits>
#include <sstream>

#include "model/gguf.h"

namespace laminar::model {

std::string GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "type " + std::to_string(static_cast<uint32_t>(type));
}

size_t GgufValue::array_size() const {
  if (!is_array()) return 0;
  return std::visit(
      [](const auto& v) -> size_t {
        if constexpr (requires { v.size(); } &&
                      !std::is_same_v<std::decay_t<decltype(v)>, std::string>) {
          return v.size();
        } else {
          return 0;
        }
      },
      storage_);
}

bool GgufValue::AsInt(int64_t* out) const {
  if (is_array() || type_ == GgufType::kBool) return false;
  if (const auto* i = std::get_if<int64_t>(&storage_)) {
    *out = *i;
    return true;
  }
  if (const auto* u = std::get_if<uint64_t>(&storage_)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(*u);
    return true;
  }
  return false;
}

bool GgufValue::AsFloat(double* out) const {
  if (is_array() || type_ == GgufType::kBool) return false;
  if (const auto* d = std::get_if<double>(&storage_)) {
    *out = *d;
    return true;
  }
  if (const auto* i = std::get_if<int64_t>(&storage_)) {
    *out = static_cast<double>(*i);
    return true;
  }
  if (const auto* u = std::get_if<uint64_t>(&storage_)) {
    *out = static_cast<double>(*u);
    return true;
  }
  return false;
}

bool GgufValue::AsBool(bool* out) const {
  if (type_ != GgufType::kBool) return false;
  *out = std::get<int64_t>(storage_) != 0;
  return true;
}

const std::string* GgufValue::AsString() const {
  return type_ == GgufType::kString ? &std::get<std::string>(storage_) : nullptr;
}
const std::vector<std::string>* GgufValue::AsStrings() const {
  return is_array() ? std::get_if<std::vector<std::string>>(&storage_) : nullptr;
}
const std::vector<int64_t>* GgufValue::AsInts() const {
  return is_array() ? std::get_if<std::vector<int64_t>>(&storage_) : nullptr;
}
const std::vector<uint64_t>* GgufValue::AsU64s() const {
  return is_array() ? std::get_if<std::vector<uint64_t>>(&storage_) : nullptr;
}
const std::vector<double>* GgufValue::AsFloats() const {
  return is_array() ? std::get_if<std::vector<double>>(&storage_) : nullptr;
}
const std::vector<GgufValue>* GgufValue::AsArrays() const {
  return is_array() ? std::get_if<std::vector<GgufValue>>(&storage_) : nullptr;
}

namespace {

void AppendQuoted(std::ostringstream& os, const std::string& s) {
  os << '"';
  for (char c : s.substr(0, 80)) {
    if (c == '"' || c == '\\')
      os << '\\' << c;
    else if (c == '\n')
      os << "\\n";
    else if (static_cast<unsigned char>(c) < 0x20)
      os << "\\x" << std::hex << int(c) << std::dec;
    else
      os << c;
  }
  if (s.size() > 80) os << "...";
  os << '"';
}

template <typename T>
void AppendElems(std::ostringstream& os, const std::vector<T>& v, size_t max_elems) {
  os << '[';
  for (size_t i = 0; i < v.size() && i < max_elems; ++i) {
    if (i > 0) os << ", ";
    if constexpr (std::is_same_v<T, std::string>) {
      AppendQuoted(os, v[i]);
    } else if constexpr (std::is_same_v<T, GgufValue>) {
      os << v[i].ToString(max_elems);
    } else {
      os << v[i];
    }
  }
  if (v.size() > max_elems) os << ", ...";
  os << ']';
}

}  // namespace

std::string GgufValue::ToString(size_t max_elems) const {
  std::ostringstream os;
  if (is_array()) {
    os << '[' << array_size() << " x " << GgufTypeName(array_type_) << "] ";
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (!std::is_arithmetic_v<V> && !std::is_same_v<V, std::string>) {
            AppendElems(os, v, max_elems);
          }
        },
        storage_);
    return os.str();
  }
  bool b = false;
  if (AsBool(&b)) return b ? "true" : "false";
  if (const std::string* s = AsString()) {
    AppendQuoted(os, *s);
    return os.str();
  }
  std::visit(
      [&](const auto& v) {
        if constexpr (std::is_arithmetic_v<std::decay_t<decltype(v)>>) os << v;
      },
      storage_);
  return os.str();
}

// ---- GgufFile typed getters ----

namespace {

Status Missing(const std::string& file, std::string_view key) {
  return NotFoundError(file + ": metadata key '" + std::string(key) + "' not found");
}
Status WrongType(const std::string& file, std::string_view key, const GgufValue& v,
                 std::string_view expected) {
  std::string actual = GgufTypeName(v.type());
  if (v.is_array()) actual = "array of " + GgufTypeName(v.array_type());
  return InvalidArgumentError(file + ": metadata key '" + std::string(key) + "' has type " +
                              actual + ", expected " + std::string(expected));
}

}  // namespace

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(name_, key);
  if (const std::string* s = v->AsString()) return *s;
  return WrongType(name_, key, *v, "string");
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(name_, key);
  int64_t i = 0;
  if (v->AsInt(&i)) return i;
  return WrongType(name_, key, *v, "an integer (at most INT64_MAX)");
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(name_, key);
  double d = 0;
  if (v->AsFloat(&d)) return d;
  return WrongType(name_, key, *v, "a number");
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(name_, key);
  bool b = false;
  if (v->AsBool(&b)) return b;
  return WrongType(name_, key, *v, "bool");
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(name_, key);
  if (const auto* a = v->AsStrings()) return *a;
  return WrongType(name_, key, *v, "array of string");
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(name_, key);
  if (const auto* a = v->AsInts()) return *a;
  if (const auto* u = v->AsU64s()) {
    std::vector<int64_t> out(u->size());
    for (size_t i = 0; i < u->size(); ++i) {
      if ((*u)[i] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return OutOfRangeError(name_ + ": metadata key '" + std::string(key) + "' element " +
                               std::to_string(i) + " exceeds INT64_MAX");
      }
      out[i] = static_cast<int64_t>((*u)[i]);
    }
    return out;
  }
  return WrongType(name_, key, *v, "array of integers");
}

StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(name_, key);
  std::vector<float> out;
  if (const auto* d = v->AsFloats()) {
    out.assign(d->begin(), d->end());
  } else if (const auto* i = v->AsInts(); i != nullptr && v->array_type() != GgufType::kBool) {
    out.assign(i->begin(), i->end());
  } else if (const auto* u = v->AsU64s()) {
    out.assign(u->begin(), u->end());
  } else {
    return WrongType(name_, key, *v, "array of numbers");
  }
  return out;
}

StatusOr<std::string> GgufFile::GetStringOr(std::string_view key, std::string fallback) const {
  if (!Has(key)) return fallback;
  return GetString(key);
}
StatusOr<int64_t> GgufFile::GetIntOr(std::string_view key, int64_t fallback) const {
  if (!Has(key)) return fallback;
  return GetInt(key);
}
StatusOr<double> GgufFile::GetFloatOr(std::string_view key, double fallback) const {
  if (!Has(key)) return fallback;
  return GetFloat(key);
}
StatusOr<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  if (!Has(key)) return fallback;
  return GetBool(key);
}

}  // namespace laminar::model
