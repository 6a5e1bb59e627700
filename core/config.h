// Configuration: YAML recipes (yaml-cpp) with dotted command-line overrides, validated against a
// typed schema. An unknown key is an error naming the key, where it came from (file and line, or
// the override) and the closest valid key; a wrong type names the expected type.
//
//   ConfigSchema schema;
//   schema.AddFloat("actor.lr", 1e-6, "learning rate").AddInt("rollout.num_workers", 1, "...");
//   LAMINAR_ASSIGN_OR_RETURN(Config cfg, Config::Load("recipe.yaml", {"actor.lr=2e-6"}, schema));
//   double lr = cfg.GetFloat("actor.lr");
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace laminar {

enum class ConfigType {
  kBool,
  kInt,
  kFloat,
  kString,
  kStringList,
  kFloatList,
  kIntList,
  kMap,
  kList
};
// "bool", "int", "float", "string", "list of strings", ..., "map".
std::string ConfigTypeName(ConfigType type);

// One documented key. A kMap field accepts any map subtree and a kList field any list (user-defined
// sections such as reward arguments or a list of reward components); their owner validates them.
struct ConfigField {
  std::string path;  // dotted, e.g. "actor.lr"
  ConfigType type = ConfigType::kString;
  YAML::Node default_value;  // null: required
  std::string doc;
  std::vector<std::string> choices;  // for kString: allowed values (empty = any)
  std::optional<double> min, max;    // for kInt/kFloat
};

// The set of valid keys. Not thread-safe for mutation; immutable once built.
class ConfigSchema {
 public:
  ConfigSchema& AddBool(const std::string& path, bool def, const std::string& doc);
  ConfigSchema& AddInt(const std::string& path, int64_t def, const std::string& doc,
                       std::optional<double> min = std::nullopt,
                       std::optional<double> max = std::nullopt);
  ConfigSchema& AddFloat(const std::string& path, double def, const std::string& doc,
                         std::optional<double> min = std::nullopt,
                         std::optional<double> max = std::nullopt);
  ConfigSchema& AddString(const std::string& path, const std::string& def, const std::string& doc,
                          std::vector<std::string> choices = {});
  // A key with no default: Validate fails if the recipe does not set it.
  ConfigSchema& AddRequired(const std::string& path, ConfigType type, const std::string& doc);
  ConfigSchema& AddStringList(const std::string& path, std::vector<std::string> def,
                              const std::string& doc);
  ConfigSchema& AddMap(const std::string& path, const std::string& doc);
  // A list of anything (empty by default), validated by its owner.
  ConfigSchema& AddList(const std::string& path, const std::string& doc);
  ConfigSchema& Add(ConfigField field);

  const ConfigField* Find(const std::string& path) const;
  const std::vector<ConfigField>& fields() const { return fields_; }
  // The valid key closest to `path` by edit distance (for "did you mean").
  std::string Closest(const std::string& path) const;
  // A commented YAML document listing every key with its type, default and doc.
  std::string ReferenceYaml() const;

 private:
  std::vector<ConfigField> fields_;
  std::map<std::string, size_t> index_;
};

// A validated configuration. Copyable (YAML nodes share structure; Clone() for a deep copy).
class Config {
 public:
  // Parses `path`, applies `overrides` ("a.b=value"; the value is parsed as YAML, so lists and
  // numbers work), checks every key against `schema` and fills defaults. Errors: NotFound (file),
  // InvalidArgument (YAML syntax with line, unknown key with suggestion, wrong type, value out of
  // range, missing required key, malformed override).
  static StatusOr<Config> Load(const std::string& path, const std::vector<std::string>& overrides,
                               const ConfigSchema& schema);
  // The same from text; `source` names it in errors.
  static StatusOr<Config> FromString(const std::string& yaml, const std::string& source,
                                     const std::vector<std::string>& overrides,
                                     const ConfigSchema& schema);

  // Typed getters for keys in the schema. A key outside the schema, or of another type, is a bug
  // (CHECK-fails): validation already guaranteed presence and type.
  bool GetBool(const std::string& path) const;
  int64_t GetInt(const std::string& path) const;
  double GetFloat(const std::string& path) const;
  std::string GetString(const std::string& path) const;
  std::vector<std::string> GetStringList(const std::string& path) const;
  std::vector<double> GetFloatList(const std::string& path) const;
  std::vector<int64_t> GetIntList(const std::string& path) const;
  // The subtree at `path` (kMap keys, or any section); a null node when absent.
  YAML::Node GetNode(const std::string& path) const;
  // Whether the recipe or an override set `path` (as opposed to the default).
  bool IsSet(const std::string& path) const;

  const std::string& source() const { return source_; }
  // The resolved configuration (defaults filled) as YAML text.
  std::string ToYaml() const;

 private:
  Config() = default;
  YAML::Node Lookup(const std::string& path) const;
  YAML::Node root_;
  std::map<std::string, bool> set_;
  std::string source_;
};

// Levenshtein distance, exposed for tests and other "did you mean" messages.
size_t EditDistance(const std::string& a, const std::string& b);

}  // namespace laminar
