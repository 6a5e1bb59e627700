// config.json parsing with typed field access, and config.json / generation_config.json writing.
#include "model/hf_config.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "core/json_util.h"

namespace laminar::model {
namespace {

using nlohmann::json;

// What differs between the supported architectures; defaults are transformers' when a field is
// absent from config.json.
struct ArchInfo {
  std::string_view name;        // ModelConfig::architecture
  std::string_view hf_class;    // architectures[0]
  std::string_view model_type;  // model_type
  int64_t default_max_positions;
  int64_t default_bos;  // -1: none
  int64_t default_eos;  // -1: none
};
constexpr ArchInfo kArchs[] = {
    {"llama", "LlamaForCausalLM", "llama", 2048, 1, 2},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", 32768, -1, -1},
    {"mistral", "MistralForCausalLM", "mistral", 4096 * 32, 1, 2},
};

const ArchInfo* FindArch(std::string_view key) {
  for (const ArchInfo& a : kArchs) {
    if (a.name == key || a.hf_class == key || a.model_type == key) return &a;
  }
  return nullptr;
}

// Typed access to the fields of one JSON object; errors name the source and the field.
class Fields {
 public:
  Fields(const json& obj, const std::string& source, std::string prefix = "")
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  // In the object, possibly null.
  bool Present(const char* name) const { return obj_.contains(name); }
  // Present and not null.
  bool Has(const char* name) const { return obj_.contains(name) && !obj_.at(name).is_null(); }
  const json& At(const char* name) const { return obj_.at(name); }

  StatusOr<int64_t> Int(const char* name) const {
    if (!Has(name)) return Error(name, "missing required field");
    return IntValue(obj_.at(name), name);
  }
  StatusOr<int64_t> Int(const char* name, int64_t fallback) const {
    return Has(name) ? IntValue(obj_.at(name), name) : StatusOr<int64_t>(fallback);
  }
  StatusOr<double> Double(const char* name) const {
    if (!Has(name)) return Error(name, "missing required field");
    const json& v = obj_.at(name);
    if (!v.is_number()) return Error(name, "must be a number, got " + JsonSnippet(v));
    return v.get<double>();
  }
  StatusOr<double> Double(const char* name, double fallback) const {
    return Has(name) ? Double(name) : StatusOr<double>(fallback);
  }
  StatusOr<bool> Bool(const char* name, bool fallback) const {
    if (!Has(name)) return fallback;
    const json& v = obj_.at(name);
    if (!v.is_boolean()) return Error(name, "must be true or false, got " + JsonSnippet(v));
    return v.get<bool>();
  }
  StatusOr<std::string> String(const char* name, std::string fallback) const {
    if (!Has(name)) return fallback;
    const json& v = obj_.at(name);
    if (!v.is_string()) return Error(name, "must be a string, got " + JsonSnippet(v));
    return v.get<std::string>();
  }
  Status Error(const std::string& name, const std::string& what) const {
    return InvalidArgumentError(source_ + ": field '" + prefix_ + name + "': " + what);
  }

 private:
  StatusOr<int64_t> IntValue(const json& v, const std::string& name) const {
    if (!v.is_number_integer()) return Error(name, "must be an integer, got " + JsonSnippet(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{1} << 62) {
      return Error(name, "is too large: " + JsonSnippet(v));
    }
    return v.get<int64_t>();
  }
  const json& obj_;
  const std::string& source_;
  std::string prefix_;
};

// rope_scaling (or rope_parameters) object -> RopeScaling; "default" means none.
StatusOr<std::optional<RopeScaling>> ParseRopeScaling(const json& v, const std::string& source,
                                                      const std::string& field) {
  if (!v.is_object()) {
    return InvalidArgumentError(source + ": field '" + field + "' must be an object, got " +
                                JsonSnippet(v));
  }
  Fields f(v, source, field + ".");
  LAMINAR_ASSIGN_OR_RETURN(std::string type, f.String("type", "default"));
  LAMINAR_ASSIGN_OR_RETURN(type, f.String("rope_type", type));
  if (type == "default") return std::optional<RopeScaling>();
  RopeScaling s;
  s.type = type;
  LAMINAR_ASSIGN_OR_RETURN(s.factor, f.Double("factor"));
  if (type == "llama3") {
    LAMINAR_ASSIGN_OR_RETURN(s.low_freq_factor, f.Double("low_freq_factor"));
    LAMINAR_ASSIGN_OR_RETURN(s.high_freq_factor, f.Double("high_freq_factor"));
    LAMINAR_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                             f.Int("original_max_position_embeddings"));
  } else if (type != "linear") {
    return UnimplementedError(source + ": field '" + field + "': rope type '" + type +
                              "' is not supported (supported: default, linear, llama3)");
  }
  if (!(s.factor > 0)) return f.Error("factor", "must be positive");
  return std::optional<RopeScaling>(s);
}

StatusOr<const ArchInfo*> ParseArchitecture(const Fields& f, const std::string& source) {
  std::string name;
  if (f.Has("architectures")) {
    const json& a = f.At("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string()) {
      return f.Error("architectures", "must be a non-empty list of strings, got " + JsonSnippet(a));
    }
    name = a[0].get<std::string>();
  } else {
    LAMINAR_ASSIGN_OR_RETURN(name, f.String("model_type", ""));
    if (name.empty()) return f.Error("architectures", "missing (and no model_type)");
  }
  const ArchInfo* arch = FindArch(name);
  if (arch == nullptr) {
    return UnimplementedError(source + ": architecture '" + name +
                              "' is not supported (supported: LlamaForCausalLM, "
                              "Qwen2ForCausalLM, MistralForCausalLM)");
  }
  return arch;
}

Status ParseTokenIds(const Fields& f, const ArchInfo& arch, ModelConfig* m) {
  // Absent: the architecture's default; null: none.
  m->bos_token_id = f.Present("bos_token_id") ? -1 : arch.default_bos;
  if (f.Has("bos_token_id")) {
    LAMINAR_ASSIGN_OR_RETURN(m->bos_token_id, f.Int("bos_token_id"));
  }
  m->eos_token_ids.clear();
  if (!f.Has("eos_token_id")) {
    if (!f.Present("eos_token_id") && arch.default_eos >= 0) {
      m->eos_token_ids.push_back(arch.default_eos);
    }
    return OkStatus();
  }
  const json& eos = f.At("eos_token_id");
  if (eos.is_array()) {
    for (const json& e : eos) {
      if (!e.is_number_integer())
        return f.Error("eos_token_id", "list holds a non-integer " + JsonSnippet(e));
      m->eos_token_ids.push_back(e.get<int64_t>());
    }
    return OkStatus();
  }
  LAMINAR_ASSIGN_OR_RETURN(int64_t id, f.Int("eos_token_id"));
  m->eos_token_ids.push_back(id);
  return OkStatus();
}

Status ParseRope(const Fields& f, const std::string& source, ModelConfig* m) {
  LAMINAR_ASSIGN_OR_RETURN(m->rope_theta, f.Double("rope_theta", 10000.0));
  m->rope_scaling.reset();
  if (f.Has("rope_scaling")) {
    LAMINAR_ASSIGN_OR_RETURN(m->rope_scaling,
                             ParseRopeScaling(f.At("rope_scaling"), source, "rope_scaling"));
  }
  if (f.Has("rope_parameters")) {  // transformers 5 spelling; takes priority
    const json& p = f.At("rope_parameters");
    LAMINAR_ASSIGN_OR_RETURN(m->rope_scaling, ParseRopeScaling(p, source, "rope_parameters"));
    LAMINAR_ASSIGN_OR_RETURN(
        m->rope_theta, Fields(p, source, "rope_parameters.").Double("rope_theta", m->rope_theta));
  }
  return OkStatus();
}

// Features of the HF modules that our graph does not have.
Status RejectUnsupported(const Fields& f, const ArchInfo& arch, const std::string& source) {
  LAMINAR_ASSIGN_OR_RETURN(std::string act, f.String("hidden_act", "silu"));
  if (act != "silu") {
    return UnimplementedError(source + ": field 'hidden_act': '" + act +
                              "' is not supported (silu)");
  }
  LAMINAR_ASSIGN_OR_RETURN(bool mlp_bias, f.Bool("mlp_bias", false));
  if (mlp_bias)
    return UnimplementedError(source + ": field 'mlp_bias': MLP biases are not supported");
  LAMINAR_ASSIGN_OR_RETURN(bool sliding, f.Bool("use_sliding_window", false));
  if (arch.name == "qwen2" && sliding) {
    return UnimplementedError(source +
                              ": field 'use_sliding_window': sliding-window attention is "
                              "not supported");
  }
  return OkStatus();
}

}  // namespace

std::string_view TorchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    default:
      return "";
  }
}

StatusOr<HfConfig> ParseHfConfig(std::string_view json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return InvalidArgumentError(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) return InvalidArgumentError(source + ": top level is not a JSON object");
  Fields f(j, source);
  LAMINAR_ASSIGN_OR_RETURN(const ArchInfo* arch, ParseArchitecture(f, source));
  LAMINAR_RETURN_IF_ERROR(RejectUnsupported(f, *arch, source));
  HfConfig out;
  ModelConfig& m = out.model;
  m.architecture = std::string(arch->name);
  LAMINAR_ASSIGN_OR_RETURN(m.vocab_size, f.Int("vocab_size"));
  LAMINAR_ASSIGN_OR_RETURN(m.hidden_size, f.Int("hidden_size"));
  LAMINAR_ASSIGN_OR_RETURN(m.intermediate_size, f.Int("intermediate_size"));
  LAMINAR_ASSIGN_OR_RETURN(m.num_hidden_layers, f.Int("num_hidden_layers"));
  LAMINAR_ASSIGN_OR_RETURN(m.num_attention_heads, f.Int("num_attention_heads"));
  LAMINAR_ASSIGN_OR_RETURN(m.num_key_value_heads,
                           f.Int("num_key_value_heads", m.num_attention_heads));
  if (m.num_attention_heads <= 0) return f.Error("num_attention_heads", "must be positive");
  LAMINAR_ASSIGN_OR_RETURN(m.head_dim, f.Int("head_dim", m.hidden_size / m.num_attention_heads));
  LAMINAR_ASSIGN_OR_RETURN(m.max_position_embeddings,
                           f.Int("max_position_embeddings", arch->default_max_positions));
  if (arch->name == "mistral" && f.Has("sliding_window")) {
    // We attend to the whole context, which is Mistral's sliding-window attention exactly when
    // no sequence is longer than the window: the context is capped there.
    LAMINAR_ASSIGN_OR_RETURN(int64_t window, f.Int("sliding_window"));
    if (window <= 0) return f.Error("sliding_window", "must be positive or null");
    m.max_position_embeddings = std::min(m.max_position_embeddings, window);
  }
  LAMINAR_RETURN_IF_ERROR(ParseRope(f, source, &m));
  LAMINAR_ASSIGN_OR_RETURN(m.rms_norm_eps, f.Double("rms_norm_eps", 1e-6));
  LAMINAR_ASSIGN_OR_RETURN(m.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  LAMINAR_ASSIGN_OR_RETURN(m.attention_bias, f.Bool("attention_bias", false));
  if (arch->name == "qwen2") {
    m.attention_bias = true;  // Qwen2Attention: q/k/v always carry a bias, o_proj never
  } else if (m.attention_bias) {
    return UnimplementedError(source + ": field 'attention_bias': " + std::string(arch->hf_class) +
                              " with attention_bias also biases o_proj, which is not supported");
  }
  LAMINAR_RETURN_IF_ERROR(ParseTokenIds(f, *arch, &m));
  LAMINAR_ASSIGN_OR_RETURN(out.torch_dtype, f.String("dtype", ""));
  LAMINAR_ASSIGN_OR_RETURN(out.torch_dtype, f.String("torch_dtype", out.torch_dtype));
  m.rope_layout = RopeLayout::kRotateHalf;
  LAMINAR_RETURN_IF_ERROR(m.Validate(source));
  return out;
}

StatusOr<std::string> HfConfigToJson(const ModelConfig& m, std::string_view torch_dtype) {
  const ArchInfo* arch = FindArch(m.architecture);
  if (arch == nullptr || arch->name != m.architecture) {
    return UnimplementedError("architecture '" + m.architecture +
                              "' has no Hugging Face equivalent (llama, qwen2, mistral)");
  }
  bool qwen2 = arch->name == "qwen2";
  if (m.attention_bias != qwen2) {
    return UnimplementedError(std::string(arch->hf_class) +
                              (qwen2 ? " always has q/k/v biases but attention_bias is false"
                                     : " cannot express q/k/v biases without an o_proj bias"));
  }
  nlohmann::ordered_json j;
  j["architectures"] = {std::string(arch->hf_class)};
  j["model_type"] = std::string(arch->model_type);
  j["hidden_act"] = "silu";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.hidden_size;
  j["intermediate_size"] = m.intermediate_size;
  j["num_hidden_layers"] = m.num_hidden_layers;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_key_value_heads"] = m.num_key_value_heads;
  j["head_dim"] = m.head_dim;
  j["max_position_embeddings"] = m.max_position_embeddings;
  j["rope_theta"] = m.rope_theta;
  j["rope_scaling"] = nullptr;
  if (m.rope_scaling) {
    const RopeScaling& s = *m.rope_scaling;
    nlohmann::ordered_json r;
    r["rope_type"] = s.type;
    r["factor"] = s.factor;
    if (s.type == "llama3") {
      r["low_freq_factor"] = s.low_freq_factor;
      r["high_freq_factor"] = s.high_freq_factor;
      r["original_max_position_embeddings"] = s.original_max_position_embeddings;
    } else if (s.type != "linear") {
      return UnimplementedError("rope_scaling type '" + s.type + "' is not supported");
    }
    j["rope_scaling"] = std::move(r);
  }
  j["rms_norm_eps"] = m.rms_norm_eps;
  j["tie_word_embeddings"] = m.tie_word_embeddings;
  if (!qwen2) j["attention_bias"] = false;
  if (qwen2) j["use_sliding_window"] = false;
  if (arch->name == "mistral") j["sliding_window"] = nullptr;  // full attention, as we compute
  j["bos_token_id"] = m.bos_token_id >= 0 ? json(m.bos_token_id) : json(nullptr);
  if (m.eos_token_ids.size() == 1) {
    j["eos_token_id"] = m.eos_token_ids[0];
  } else {
    j["eos_token_id"] = m.eos_token_ids.empty() ? json(nullptr) : json(m.eos_token_ids);
  }
  j["torch_dtype"] = std::string(torch_dtype);
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

std::string HfGenerationConfigJson(const ModelConfig& m) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (m.bos_token_id >= 0) j["bos_token_id"] = m.bos_token_id;
  if (m.eos_token_ids.size() == 1) {
    j["eos_token_id"] = m.eos_token_ids[0];
  } else if (!m.eos_token_ids.empty()) {
    j["eos_token_id"] = m.eos_token_ids;
  }
  return j.dump(2) + "\n";
}

}  // namespace laminar::model
