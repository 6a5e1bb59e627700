// Config loading: YAML parse, dotted overrides, schema validation with "did you mean".
#include "core/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "core/check.h"
#include "core/mapped_file.h"

namespace laminar {
namespace {

// A handler that drops yaml-cpp's parse events: only the number of documents is wanted.
class IgnoreEvents : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// The YAML documents in `yaml`, counted up to 2. Not YAML::LoadAll: on a ',' outside a flow
// collection at the top level (",x", "[1],") yaml-cpp 0.7 yields empty documents forever, and
// LoadAll collects them until memory runs out (found by tests/fuzz/recipe_fuzz.cc).
int CountDocumentsUpTo2(const std::string& yaml) {
  std::istringstream in(yaml);
  YAML::Parser parser(in);
  IgnoreEvents events;
  int docs = 0;
  while (docs < 2 && parser.HandleNextDocument(events)) ++docs;
  return docs;
}

// The shortest text that reads back as `x` (std::to_chars): 0.1, 1e-06, 63; "inf" / "nan" for
// the others.
std::string ShortestText(double x) {
  char text[32];
  return std::string(text, std::to_chars(text, text + sizeof(text), x).ptr);
}

std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : path) {
    if (c == '.') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

std::string Where(const std::string& source, const YAML::Mark& mark) {
  if (mark.line < 0) return source;
  return source + ":" + std::to_string(mark.line + 1);
}

// Where each key came from: "recipe.yaml:12" or "override 'actor.lr=1'".
using Provenance = std::map<std::string, std::string>;

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "nothing";
}

bool IsScalarOf(const YAML::Node& n, ConfigType t) {
  if (!n.IsScalar()) return false;
  switch (t) {
    case ConfigType::kBool: {
      bool b;
      return YAML::convert<bool>::decode(n, b);
    }
    case ConfigType::kInt: {
      int64_t i;
      return YAML::convert<int64_t>::decode(n, i);
    }
    case ConfigType::kFloat: {
      double d;
      return YAML::convert<double>::decode(n, d);
    }
    default:
      return true;
  }
}

bool HasType(const YAML::Node& n, ConfigType type) {
  switch (type) {
    case ConfigType::kBool:
    case ConfigType::kInt:
    case ConfigType::kFloat:
    case ConfigType::kString:
      return IsScalarOf(n, type);
    case ConfigType::kStringList:
    case ConfigType::kFloatList:
    case ConfigType::kIntList: {
      if (!n.IsSequence()) return false;
      ConfigType elem = type == ConfigType::kStringList  ? ConfigType::kString
                        : type == ConfigType::kFloatList ? ConfigType::kFloat
                                                         : ConfigType::kInt;
      for (const auto& e : n) {
        if (!IsScalarOf(e, elem)) return false;
      }
      return true;
    }
    case ConfigType::kMap:
      return n.IsMap() || n.IsNull();
    case ConfigType::kList:
      return n.IsSequence() || n.IsNull();
  }
  return false;
}

class Validator {
 public:
  Validator(const ConfigSchema& schema, const Provenance& prov, std::string source)
      : schema_(schema), prov_(prov), source_(std::move(source)) {}

  Status Walk(const YAML::Node& node, const std::string& prefix) {
    std::map<std::string, int> seen;  // key -> line, for duplicates (yaml-cpp keeps the first)
    for (auto it = node.begin(); it != node.end(); ++it) {
      std::string key = it->first.Scalar();
      std::string path = prefix.empty() ? key : prefix + "." + key;
      std::string where = WhereIs(path, it->first.Mark());
      if (!prov_.count(path) && key.find('.') != std::string::npos) {
        return InvalidArgumentError(where + ": dotted key '" + key +
                                    "' inside a recipe; write nested sections instead (dotted "
                                    "keys are for command-line overrides)");
      }
      auto [dup, fresh] = seen.emplace(key, it->first.Mark().line + 1);
      if (!fresh) {
        return InvalidArgumentError(where + ": key '" + path + "' appears twice (first at line " +
                                    std::to_string(dup->second) + ")");
      }
      if (const ConfigField* f = schema_.Find(path)) {
        LAMINAR_RETURN_IF_ERROR(CheckValue(*f, it->second, where));
        continue;
      }
      if (IsSection(path)) {
        if (!it->second.IsMap()) {
          return InvalidArgumentError(where + ": '" + path +
                                      "' is a section and must be a map, got " +
                                      Describe(it->second));
        }
        LAMINAR_RETURN_IF_ERROR(Walk(it->second, path));
        continue;
      }
      return InvalidArgumentError(where + ": unknown key '" + path + "'; did you mean '" +
                                  schema_.Closest(path) + "'?");
    }
    return OkStatus();
  }

 private:
  std::string WhereIs(const std::string& path, const YAML::Mark& mark) const {
    auto it = prov_.find(path);
    if (it != prov_.end()) return it->second;
    return Where(source_, mark);
  }

  bool IsSection(const std::string& path) const {
    std::string p = path + ".";
    for (const auto& f : schema_.fields()) {
      if (f.path.compare(0, p.size(), p) == 0) return true;
    }
    return false;
  }

  Status CheckValue(const ConfigField& f, const YAML::Node& n, const std::string& where) {
    if (!HasType(n, f.type)) {
      return InvalidArgumentError(where + ": key '" + f.path + "' expects " +
                                  ConfigTypeName(f.type) + ", got " + Describe(n));
    }
    if (f.type == ConfigType::kInt || f.type == ConfigType::kFloat) {
      double v = 0;
      if (f.type == ConfigType::kInt) {
        int64_t i = 0;
        YAML::convert<int64_t>::decode(n, i);
        v = static_cast<double>(i);
      } else {
        YAML::convert<double>::decode(n, v);
      }
      if (std::isnan(v)) {
        return InvalidArgumentError(where + ": key '" + f.path + "' is NaN");
      }
      if ((f.min && v < *f.min) || (f.max && v > *f.max)) {
        std::ostringstream os;
        // Bounds as written: [1, 63], not [1.000000, 63.000000].
        os << where << ": key '" << f.path << "' = " << n.Scalar() << " is outside ["
           << (f.min ? ShortestText(*f.min) : "-inf") << ", "
           << (f.max ? ShortestText(*f.max) : "inf") << "]";
        return InvalidArgumentError(os.str());
      }
    }
    if (f.type == ConfigType::kString && !f.choices.empty() &&
        std::find(f.choices.begin(), f.choices.end(), n.Scalar()) == f.choices.end()) {
      std::string list;
      for (const auto& c : f.choices) list += (list.empty() ? "" : ", ") + c;
      return InvalidArgumentError(where + ": key '" + f.path + "' = '" + n.Scalar() +
                                  "' is not one of: " + list);
    }
    return OkStatus();
  }

  const ConfigSchema& schema_;
  const Provenance& prov_;
  std::string source_;
};

// Sets `value` at the dotted `path`, creating maps; fails if a scalar is in the way.
Status SetPath(YAML::Node root, const std::string& path, const YAML::Node& value,
               const std::string& where) {
  auto parts = SplitPath(path);
  YAML::Node cur = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = cur[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[parts[i]];
    } else if (!next.IsMap()) {
      return InvalidArgumentError(where + ": '" + parts[i] + "' is not a map");
    }
    cur.reset(next);
  }
  cur[parts.back()] = value;
  return OkStatus();
}

bool ValidKeyPath(const std::string& key) {
  if (key.empty() || key.front() == '.' || key.back() == '.') return false;
  for (size_t i = 0; i < key.size(); ++i) {
    char c = key[i];
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    if (!ok || (c == '.' && key[i + 1] == '.')) return false;
  }
  return true;
}

}  // namespace

std::string ConfigTypeName(ConfigType type) {
  switch (type) {
    case ConfigType::kBool:
      return "a bool";
    case ConfigType::kInt:
      return "an int";
    case ConfigType::kFloat:
      return "a float";
    case ConfigType::kString:
      return "a string";
    case ConfigType::kStringList:
      return "a list of strings";
    case ConfigType::kFloatList:
      return "a list of floats";
    case ConfigType::kIntList:
      return "a list of ints";
    case ConfigType::kMap:
      return "a map";
    case ConfigType::kList:
      return "a list";
  }
  return "?";
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

ConfigSchema& ConfigSchema::Add(ConfigField field) {
  LAMINAR_CHECK(ValidKeyPath(field.path)) << "invalid config key '" << field.path << "'";
  LAMINAR_CHECK(index_.count(field.path) == 0) << "config key '" << field.path << "' added twice";
  index_[field.path] = fields_.size();
  fields_.push_back(std::move(field));
  return *this;
}

ConfigSchema& ConfigSchema::AddBool(const std::string& path, bool def, const std::string& doc) {
  return Add({path, ConfigType::kBool, YAML::Node(def), doc, {}, {}, {}});
}
ConfigSchema& ConfigSchema::AddInt(const std::string& path, int64_t def, const std::string& doc,
                                   std::optional<double> min, std::optional<double> max) {
  return Add({path, ConfigType::kInt, YAML::Node(def), doc, {}, min, max});
}
ConfigSchema& ConfigSchema::AddFloat(const std::string& path, double def, const std::string& doc,
                                     std::optional<double> min, std::optional<double> max) {
  // The shortest text that reads back as `def` (0.1, not yaml-cpp's 0.10000000000000001), so the
  // reference and `laminar config` print the value as a user writes it (yaml-cpp's own .inf/.nan
  // for the others).
  if (!std::isfinite(def))
    return Add({path, ConfigType::kFloat, YAML::Node(def), doc, {}, min, max});
  return Add({path, ConfigType::kFloat, YAML::Node(ShortestText(def)), doc, {}, min, max});
}
ConfigSchema& ConfigSchema::AddString(const std::string& path, const std::string& def,
                                      const std::string& doc, std::vector<std::string> choices) {
  return Add({path, ConfigType::kString, YAML::Node(def), doc, std::move(choices), {}, {}});
}
ConfigSchema& ConfigSchema::AddRequired(const std::string& path, ConfigType type,
                                        const std::string& doc) {
  return Add({path, type, YAML::Node(), doc, {}, {}, {}});
}
ConfigSchema& ConfigSchema::AddStringList(const std::string& path, std::vector<std::string> def,
                                          const std::string& doc) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (const auto& s : def) n.push_back(s);
  return Add({path, ConfigType::kStringList, n, doc, {}, {}, {}});
}
ConfigSchema& ConfigSchema::AddMap(const std::string& path, const std::string& doc) {
  return Add({path, ConfigType::kMap, YAML::Node(YAML::NodeType::Map), doc, {}, {}, {}});
}

ConfigSchema& ConfigSchema::AddList(const std::string& path, const std::string& doc) {
  return Add({path, ConfigType::kList, YAML::Node(YAML::NodeType::Sequence), doc, {}, {}, {}});
}

const ConfigField* ConfigSchema::Find(const std::string& path) const {
  auto it = index_.find(path);
  return it == index_.end() ? nullptr : &fields_[it->second];
}

std::string ConfigSchema::Closest(const std::string& path) const {
  std::string best;
  size_t best_d = static_cast<size_t>(-1);
  for (const auto& f : fields_) {
    size_t d = EditDistance(path, f.path);
    if (d < best_d) {
      best_d = d;
      best = f.path;
    }
  }
  return best;
}

std::string ConfigSchema::ReferenceYaml() const {
  std::ostringstream os;
  for (const auto& f : fields_) {
    os << "# " << f.doc << " (" << ConfigTypeName(f.type);
    if (!f.choices.empty()) {
      os << ": one of";
      for (const auto& c : f.choices) os << " " << c;
    }
    os << ")\n";
    YAML::Emitter e;
    e << YAML::Flow << f.default_value;
    os << f.path << ": " << (f.default_value.IsNull() ? "<required>" : e.c_str()) << "\n";
  }
  return os.str();
}

StatusOr<Config> Config::Load(const std::string& path, const std::vector<std::string>& overrides,
                              const ConfigSchema& schema) {
  LAMINAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return FromString(text, path, overrides, schema);
}

StatusOr<Config> Config::FromString(const std::string& yaml, const std::string& source,
                                    const std::vector<std::string>& overrides,
                                    const ConfigSchema& schema) {
  Config cfg;
  cfg.source_ = source;
  try {
    if (CountDocumentsUpTo2(yaml) > 1) {
      return InvalidArgumentError(source +
                                  ": holds more than one YAML document ('---', or a ',' outside a "
                                  "[ ] or { } collection); a recipe is one document");
    }
    cfg.root_ = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(Where(source, e.mark) + ": YAML syntax error: " + e.msg);
  }
  if (cfg.root_.IsNull() || !cfg.root_.IsDefined()) cfg.root_ = YAML::Node(YAML::NodeType::Map);
  if (!cfg.root_.IsMap()) {
    return InvalidArgumentError(source + ": a recipe must be a YAML map of sections, got " +
                                Describe(cfg.root_));
  }
  // Collect keys set in the file before overrides and defaults are applied.
  Provenance prov;
  for (const auto& ov : overrides) {
    auto eq = ov.find('=');
    std::string where = "override '" + ov + "'";
    if (eq == std::string::npos) {
      return InvalidArgumentError(where + ": expected key=value, e.g. actor.lr=1e-6");
    }
    std::string key = ov.substr(0, eq);
    if (!ValidKeyPath(key)) return InvalidArgumentError(where + ": malformed key '" + key + "'");
    YAML::Node value;
    try {
      value = YAML::Load(ov.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      return InvalidArgumentError(where + ": cannot parse the value: " + e.msg);
    }
    if (!value.IsDefined()) value = YAML::Node(std::string());
    prov[key] = where;
    try {
      LAMINAR_RETURN_IF_ERROR(SetPath(cfg.root_, key, value, where));
    } catch (const YAML::Exception& e) {
      return InvalidArgumentError(where + ": " + e.msg);
    }
  }
  try {
    Validator v(schema, prov, source);
    LAMINAR_RETURN_IF_ERROR(v.Walk(cfg.root_, ""));
    for (const auto& f : schema.fields()) {
      YAML::Node existing = cfg.Lookup(f.path);
      if (existing.IsDefined() && !existing.IsNull()) {
        cfg.set_[f.path] = true;
        continue;
      }
      if (existing.IsDefined() && existing.IsNull() &&
          (f.type == ConfigType::kMap || f.type == ConfigType::kList)) {
        cfg.set_[f.path] = true;
      }
      if (f.default_value.IsNull()) {
        return InvalidArgumentError(source + ": missing required key '" + f.path + "' (" +
                                    ConfigTypeName(f.type) + "): " + f.doc);
      }
      LAMINAR_RETURN_IF_ERROR(SetPath(cfg.root_, f.path, YAML::Clone(f.default_value), source));
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(Where(source, e.mark) + ": " + e.msg);
  }
  return cfg;
}

YAML::Node Config::Lookup(const std::string& path) const {
  // Const access only: yaml-cpp's non-const operator[] would insert empty keys.
  YAML::Node cur;
  cur.reset(root_);
  for (const auto& part : SplitPath(path)) {
    const YAML::Node& c = cur;
    if (!c.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    YAML::Node next = c[part];
    if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    cur.reset(next);
  }
  return cur;
}

bool Config::GetBool(const std::string& path) const {
  YAML::Node n = Lookup(path);
  bool b = false;
  LAMINAR_CHECK(YAML::convert<bool>::decode(n, b)) << "config key '" << path << "' is not a bool";
  return b;
}
int64_t Config::GetInt(const std::string& path) const {
  YAML::Node n = Lookup(path);
  int64_t v = 0;
  LAMINAR_CHECK(YAML::convert<int64_t>::decode(n, v)) << "config key '" << path << "' not an int";
  return v;
}
double Config::GetFloat(const std::string& path) const {
  YAML::Node n = Lookup(path);
  double v = 0;
  LAMINAR_CHECK(YAML::convert<double>::decode(n, v)) << "config key '" << path << "' not a float";
  return v;
}
std::string Config::GetString(const std::string& path) const {
  YAML::Node n = Lookup(path);
  LAMINAR_CHECK(n.IsScalar()) << "config key '" << path << "' is not a string";
  return n.Scalar();
}

template <typename T>
static std::vector<T> ListOf(const YAML::Node& n, const std::string& path) {
  std::vector<T> out;
  LAMINAR_CHECK(n.IsSequence()) << "config key '" << path << "' is not a list";
  for (const auto& e : n) {
    T v{};
    LAMINAR_CHECK(YAML::convert<T>::decode(e, v)) << "config key '" << path << "' element type";
    out.push_back(v);
  }
  return out;
}

std::vector<std::string> Config::GetStringList(const std::string& path) const {
  return ListOf<std::string>(Lookup(path), path);
}
std::vector<double> Config::GetFloatList(const std::string& path) const {
  return ListOf<double>(Lookup(path), path);
}
std::vector<int64_t> Config::GetIntList(const std::string& path) const {
  return ListOf<int64_t>(Lookup(path), path);
}
YAML::Node Config::GetNode(const std::string& path) const {
  YAML::Node n = Lookup(path);
  return n.IsDefined() ? YAML::Clone(n) : YAML::Node();
}
bool Config::IsSet(const std::string& path) const { return set_.count(path) > 0; }

std::string Config::ToYaml() const {
  YAML::Emitter e;
  e << root_;
  return std::string(e.c_str()) + "\n";
}

}  // namespace laminar
