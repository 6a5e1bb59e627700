// AdamW and SGD over a ParameterSet, global-norm clipping, and the learning-rate schedules.
#include "trainer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <utility>

#include "core/check.h"

namespace laminar::trainer {
namespace {

// ---------------------------------------------------------------------------------------------
// Config.

std::string JoinKeys(const auto& registry) {
  std::string out;
  for (const auto& [name, unused] : registry) out += (out.empty() ? "" : ", ") + name;
  return out;
}

Status FieldError(const std::string& field, double value, const std::string& want) {
  return InvalidArgumentError("optimizer." + field + " = " + std::to_string(value) + ": " + want);
}

// The JSON setters of every field, by name.
using FieldSetter = std::function<Status(const nlohmann::json&, OptimizerConfig*)>;

FieldSetter StringField(std::string OptimizerConfig::*field) {
  return [field](const nlohmann::json& v, OptimizerConfig* c) {
    if (!v.is_string()) return InvalidArgumentError("expected a string");
    c->*field = v.get<std::string>();
    return OkStatus();
  };
}
FieldSetter DoubleField(double OptimizerConfig::*field) {
  return [field](const nlohmann::json& v, OptimizerConfig* c) {
    if (!v.is_number()) return InvalidArgumentError("expected a number");
    c->*field = v.get<double>();
    return OkStatus();
  };
}
FieldSetter IntField(int64_t OptimizerConfig::*field) {
  return [field](const nlohmann::json& v, OptimizerConfig* c) {
    if (!v.is_number_integer()) return InvalidArgumentError("expected an integer");
    c->*field = v.get<int64_t>();
    return OkStatus();
  };
}

const std::map<std::string, FieldSetter>& FieldSetters() {
  static const auto* kSetters = new std::map<std::string, FieldSetter>{
      {"name", StringField(&OptimizerConfig::name)},
      {"lr", DoubleField(&OptimizerConfig::lr)},
      {"beta1", DoubleField(&OptimizerConfig::beta1)},
      {"beta2", DoubleField(&OptimizerConfig::beta2)},
      {"eps", DoubleField(&OptimizerConfig::eps)},
      {"weight_decay", DoubleField(&OptimizerConfig::weight_decay)},
      {"grad_clip", DoubleField(&OptimizerConfig::grad_clip)},
      {"lr_schedule", StringField(&OptimizerConfig::lr_schedule)},
      {"warmup_steps", IntField(&OptimizerConfig::warmup_steps)},
      {"total_steps", IntField(&OptimizerConfig::total_steps)},
      {"min_lr_ratio", DoubleField(&OptimizerConfig::min_lr_ratio)},
      {"num_cycles", DoubleField(&OptimizerConfig::num_cycles)},
      {"momentum", DoubleField(&OptimizerConfig::momentum)},
  };
  return *kSetters;
}

// ---------------------------------------------------------------------------------------------
// Schedules.

// Linear warm-up from 0: the multiplier while step < warmup_steps, else nullopt.
std::optional<double> WarmupMultiplier(const OptimizerConfig& c, int64_t step) {
  if (step >= c.warmup_steps) return std::nullopt;
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, c.warmup_steps));
}

double ConstantSchedule(const OptimizerConfig&, int64_t) { return 1.0; }

double ConstantWithWarmupSchedule(const OptimizerConfig& c, int64_t step) {
  return WarmupMultiplier(c, step).value_or(1.0);
}

double CosineSchedule(const OptimizerConfig& c, int64_t step) {
  if (auto warm = WarmupMultiplier(c, step)) return *warm;
  const double span = static_cast<double>(std::max<int64_t>(1, c.total_steps - c.warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - c.warmup_steps) / span, 0.0, 1.0);
  const double coef = (1.0 - c.min_lr_ratio) * 0.5;
  const double intercept = (1.0 + c.min_lr_ratio) * 0.5;
  const double x = std::cos(std::numbers::pi * c.num_cycles * 2.0 * progress);
  return std::max(c.min_lr_ratio, x * coef + intercept);
}

// ---------------------------------------------------------------------------------------------
// Element loops. Each runs over blocks of kLanes elements with a fixed trip count, which GCC -O2
// vectorizes (its "very cheap" cost model needs a known trip count); a last partial block runs on
// padded copies, so every element takes the same arithmetic path wherever it sits. The scalars
// are rounded to f32 once, and every operation is its own statement so no compiler fuses a
// multiply and an add (which would change the rounding).

constexpr size_t kLanes = 16;
// Smallest piece of the flat buffers a thread takes.
constexpr int64_t kMinParallelElements = 1 << 15;
// The gradient norm is summed in f64 over fixed blocks, then the block sums in order.
constexpr size_t kNormBlock = 1 << 16;

// Runs block(p, g, s0, s1) over [0, n); s0 and s1 (optimizer buffers) may be null.
template <typename BlockFn>
void RunBlocks(size_t n, float* p, const float* g, float* s0, float* s1, const BlockFn& block) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    block(p + i, g + i, s0 ? s0 + i : nullptr, s1 ? s1 + i : nullptr);
  }
  const size_t rest = n - i;
  if (rest == 0) return;
  float tp[kLanes] = {}, tg[kLanes] = {}, t0[kLanes] = {}, t1[kLanes] = {};
  std::copy_n(p + i, rest, tp);
  std::copy_n(g + i, rest, tg);
  if (s0) std::copy_n(s0 + i, rest, t0);
  if (s1) std::copy_n(s1 + i, rest, t1);
  block(tp, tg, s0 ? t0 : nullptr, s1 ? t1 : nullptr);
  std::copy_n(tp, rest, p + i);
  if (s0) std::copy_n(t0, rest, s0 + i);
  if (s1) std::copy_n(t1, rest, s1 + i);
}

struct AdamScalars {
  float grad_scale, decay, w, one_minus_w, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
};

// torch's lerp(m, g, w) (ATen/native/Lerp.h): the formula depends on whether |w| < 0.5.
template <bool kSmallWeight>
inline float Lerp(float m, float g, const AdamScalars& s) {
  const float diff = g - m;
  if constexpr (kSmallWeight) {
    const float t = s.w * diff;
    return m + t;
  } else {
    const float t = diff * s.one_minus_w;
    return g - t;
  }
}

template <bool kSmallWeight>
void AdamWBlock(const AdamScalars& s, float* __restrict p, const float* __restrict g,
                float* __restrict m, float* __restrict v) {
  float root[kLanes];
  for (size_t j = 0; j < kLanes; ++j) {
    const float gj = g[j] * s.grad_scale;
    m[j] = Lerp<kSmallWeight>(m[j], gj, s);
    const float kept = v[j] * s.beta2;
    const float scaled = s.one_minus_beta2 * gj;
    const float added = scaled * gj;
    v[j] = kept + added;
  }
  // Apart, so the square root (a libm call on the errno path GCC keeps) does not stop the other
  // loops from vectorizing.
  for (size_t j = 0; j < kLanes; ++j) root[j] = std::sqrt(v[j]);
  for (size_t j = 0; j < kLanes; ++j) {
    const float corrected = root[j] / s.bc2_sqrt;
    const float denom = corrected + s.eps;
    const float num = s.neg_step_size * m[j];
    const float update = num / denom;
    const float decayed = p[j] * s.decay;
    p[j] = decayed + update;
  }
}

struct SgdScalars {
  float grad_scale, weight_decay, momentum, neg_lr;
};

template <bool kDecay, bool kMomentum>
void SgdBlock(const SgdScalars& s, float* __restrict p, const float* __restrict g,
              float* __restrict buf) {
  for (size_t j = 0; j < kLanes; ++j) {
    float gj = g[j] * s.grad_scale;
    if constexpr (kDecay) {
      const float l2 = s.weight_decay * p[j];
      gj = gj + l2;
    }
    if constexpr (kMomentum) {
      const float kept = buf[j] * s.momentum;
      buf[j] = kept + gj;
      gj = buf[j];
    }
    const float update = s.neg_lr * gj;
    p[j] = p[j] + update;
  }
}

double BlockSumOfSquares(const float* g, size_t n) {
  double lanes[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) {
      const double x = g[i + j];
      const double sq = x * x;
      lanes[j] += sq;
    }
  }
  for (size_t j = 0; i < n; ++i, ++j) {
    const double x = g[i];
    const double sq = x * x;
    lanes[j] += sq;
  }
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Status OptimizerConfig::Validate() const {
  const auto& optimizers = OptimizerRegistry();
  if (optimizers.count(name) == 0) {
    return InvalidArgumentError("optimizer.name '" + name +
                                "' is unknown; valid: " + JoinKeys(optimizers));
  }
  const auto& schedules = LrScheduleRegistry();
  if (schedules.count(lr_schedule) == 0) {
    return InvalidArgumentError("optimizer.lr_schedule '" + lr_schedule +
                                "' is unknown; valid: " + JoinKeys(schedules));
  }
  if (!(lr >= 0) || !std::isfinite(lr)) return FieldError("lr", lr, "must be finite and >= 0");
  if (!(beta1 >= 0 && beta1 < 1)) return FieldError("beta1", beta1, "must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) return FieldError("beta2", beta2, "must be in [0, 1)");
  if (!(eps > 0) || !std::isfinite(eps)) return FieldError("eps", eps, "must be finite and > 0");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) {
    return FieldError("weight_decay", weight_decay, "must be finite and >= 0");
  }
  if (!(grad_clip >= 0) || !std::isfinite(grad_clip)) {
    return FieldError("grad_clip", grad_clip, "must be finite and >= 0 (0 = off)");
  }
  if (!(momentum >= 0 && momentum < 1))
    return FieldError("momentum", momentum, "must be in [0, 1)");
  if (warmup_steps < 0) {
    return FieldError("warmup_steps", static_cast<double>(warmup_steps), "must be >= 0");
  }
  if (total_steps < 0) {
    return FieldError("total_steps", static_cast<double>(total_steps), "must be >= 0");
  }
  if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1)) {
    return FieldError("min_lr_ratio", min_lr_ratio, "must be in [0, 1]");
  }
  if (!(num_cycles > 0) || !std::isfinite(num_cycles)) {
    return FieldError("num_cycles", num_cycles, "must be finite and > 0");
  }
  if (lr_schedule == "constant" && warmup_steps > 0) {
    return InvalidArgumentError(
        "optimizer.lr_schedule 'constant' has no warm-up but warmup_steps = " +
        std::to_string(warmup_steps) + "; use 'constant_with_warmup'");
  }
  if (lr_schedule == "cosine" && total_steps <= warmup_steps) {
    return InvalidArgumentError("optimizer.lr_schedule 'cosine' needs total_steps (" +
                                std::to_string(total_steps) + ") > warmup_steps (" +
                                std::to_string(warmup_steps) + ")");
  }
  return OkStatus();
}

nlohmann::json OptimizerConfig::ToJson() const {
  return nlohmann::json{{"name", name},
                        {"lr", lr},
                        {"beta1", beta1},
                        {"beta2", beta2},
                        {"eps", eps},
                        {"weight_decay", weight_decay},
                        {"grad_clip", grad_clip},
                        {"lr_schedule", lr_schedule},
                        {"warmup_steps", warmup_steps},
                        {"total_steps", total_steps},
                        {"min_lr_ratio", min_lr_ratio},
                        {"num_cycles", num_cycles},
                        {"momentum", momentum}};
}

StatusOr<OptimizerConfig> OptimizerConfig::FromJson(const nlohmann::json& json) {
  if (!json.is_object()) return InvalidArgumentError("optimizer config: expected a JSON object");
  OptimizerConfig config;
  const auto& setters = FieldSetters();
  for (const auto& [key, value] : json.items()) {
    auto it = setters.find(key);
    if (it == setters.end()) {
      return InvalidArgumentError("optimizer config: unknown key '" + key +
                                  "'; valid: " + JoinKeys(setters));
    }
    LAMINAR_RETURN_IF_ERROR(it->second(value, &config), "optimizer config key '" + key + "'");
  }
  LAMINAR_RETURN_IF_ERROR(config.Validate());
  return config;
}

const std::map<std::string, LrScheduleFn>& LrScheduleRegistry() {
  static const auto* kRegistry = new std::map<std::string, LrScheduleFn>{
      {"constant", ConstantSchedule},
      {"constant_with_warmup", ConstantWithWarmupSchedule},
      {"cosine", CosineSchedule},
  };
  return *kRegistry;
}

double LearningRateAt(const OptimizerConfig& config, int64_t step) {
  LAMINAR_CHECK_GE(step, 0);
  const auto& registry = LrScheduleRegistry();
  auto it = registry.find(config.lr_schedule);
  LAMINAR_CHECK(it != registry.end()) << "unknown lr_schedule " << config.lr_schedule;
  return config.lr * it->second(config, step);
}

// ---------------------------------------------------------------------------------------------

double GlobalGradNorm(std::span<const float> grads, ThreadPool* pool) {
  const size_t n = grads.size();
  const size_t num_blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(num_blocks, 0.0);
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const size_t first = static_cast<size_t>(b) * kNormBlock;
      partial[static_cast<size_t>(b)] =
          BlockSumOfSquares(grads.data() + first, std::min(kNormBlock, n - first));
    }
  };
  if (pool != nullptr && num_blocks > 1) {
    pool->ParallelFor(static_cast<int64_t>(num_blocks), 1, run);
  } else {
    run(0, static_cast<int64_t>(num_blocks));
  }
  double total = 0;
  for (double p : partial) total += p;
  return std::sqrt(total);
}

double ClipCoefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

double ClipGradNorm(std::span<float> grads, double max_norm, ThreadPool* pool) {
  const double norm = GlobalGradNorm(grads, pool);
  if (!std::isfinite(norm)) return norm;
  const double coef = ClipCoefficient(norm, max_norm);
  if (coef < 1.0) {
    const float scale = static_cast<float>(coef);
    for (float& g : grads) g *= scale;
  }
  return norm;
}

// ---------------------------------------------------------------------------------------------

Optimizer::Optimizer(const OptimizerConfig& config, size_t num_elements,
                     const std::vector<std::string>& buffer_names, ThreadPool* pool,
                     size_t shard_begin, size_t shard_end)
    : config_(config), num_elements_(num_elements), pool_(pool) {
  // Only the shard's buffers are ever allocated: a sharded rank never holds all of them.
  for (const auto& name : buffer_names) buffers_[name];
  SetShard(shard_begin, std::min(shard_end, num_elements));
}

void Optimizer::SetShard(size_t begin, size_t end) {
  LAMINAR_CHECK(begin <= end && end <= num_elements_) << begin << " " << end;
  shard_begin_ = begin;
  shard_end_ = end;
  for (auto& [name, buffer] : buffers_) {
    buffer.assign(end - begin, 0.f);
    buffer.shrink_to_fit();
  }
}

size_t Optimizer::state_bytes() const {
  size_t bytes = 0;
  for (const auto& [name, buffer] : buffers_) bytes += buffer.size() * sizeof(float);
  return bytes;
}

std::vector<std::string> Optimizer::buffer_names() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : buffers_) names.push_back(name);
  return names;
}

std::span<const float> Optimizer::buffer(const std::string& name) const {
  auto it = buffers_.find(name);
  LAMINAR_CHECK(it != buffers_.end()) << config_.name << " has no state buffer " << name;
  return it->second;
}

std::span<float> Optimizer::mutable_buffer(const std::string& name) {
  auto it = buffers_.find(name);
  LAMINAR_CHECK(it != buffers_.end()) << config_.name << " has no state buffer " << name;
  return it->second;
}

void Optimizer::RestoreCounters(int64_t step, int64_t skipped_steps) {
  LAMINAR_CHECK(step >= 0 && skipped_steps >= 0) << step << " " << skipped_steps;
  step_ = step;
  skipped_steps_ = skipped_steps;
}

StepResult Optimizer::Step(ParameterSet* params, int64_t lr_step, double loss) {
  LAMINAR_CHECK(params != nullptr);
  LAMINAR_CHECK_EQ(params->num_elements(), num_elements_)
      << "the ParameterSet does not match the optimizer's size";
  StepResult result;
  result.lr = LearningRateAt(config_, lr_step);
  result.grad_norm = GlobalGradNorm(params->grads(), pool_);
  if (!std::isfinite(loss) || !std::isfinite(result.grad_norm)) {
    ++skipped_steps_;
    return result;
  }
  UpdateArgs args;
  args.lr = result.lr;
  args.t = step_ + 1;
  args.grad_scale = static_cast<float>(ClipCoefficient(result.grad_norm, config_.grad_clip));
  const std::vector<ParamInfo>& infos = params->params();
  float* values = params->values().data();
  const float* grads = params->grads().data();
  // Each range is cut at parameter boundaries, since decay is per parameter.
  auto run = [&](int64_t begin64, int64_t end64) {
    const size_t begin = static_cast<size_t>(begin64), end = static_cast<size_t>(end64);
    auto it = std::upper_bound(infos.begin(), infos.end(), begin,
                               [](size_t x, const ParamInfo& p) { return x < p.offset + p.numel; });
    for (; it != infos.end() && it->offset < end; ++it) {
      const size_t b = std::max(begin, it->offset), e = std::min(end, it->offset + it->numel);
      if (b < e) Update(args, it->decay, b, e, values, grads);
    }
  };
  const auto first = static_cast<int64_t>(shard_begin_);
  const auto n = static_cast<int64_t>(shard_end_ - shard_begin_);
  auto run_in_shard = [&](int64_t begin, int64_t end) { run(first + begin, first + end); };
  if (pool_ != nullptr) {
    pool_->ParallelFor(n, kMinParallelElements, run_in_shard);
  } else {
    run_in_shard(0, n);
  }
  ++step_;
  result.applied = true;
  return result;
}

// ---------------------------------------------------------------------------------------------

AdamW::AdamW(const OptimizerConfig& config, size_t num_elements, ThreadPool* pool,
             size_t shard_begin, size_t shard_end)
    : Optimizer(config, num_elements, {"exp_avg", "exp_avg_sq"}, pool, shard_begin, shard_end) {}

void AdamW::Update(const UpdateArgs& args, bool decay, size_t begin, size_t end, float* values,
                   const float* grads) {
  const OptimizerConfig& c = config();
  const double t = static_cast<double>(args.t);
  const double bias_correction1 = 1.0 - std::pow(c.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(c.beta2, t);
  AdamScalars s;
  s.grad_scale = args.grad_scale;
  s.decay = decay && c.weight_decay != 0 ? static_cast<float>(1.0 - args.lr * c.weight_decay) : 1.f;
  s.w = static_cast<float>(1.0 - c.beta1);
  s.one_minus_w = 1.f - s.w;
  s.beta2 = static_cast<float>(c.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(c.eps);
  s.neg_step_size = static_cast<float>(-(args.lr / bias_correction1));
  float* m = state_at("exp_avg", begin);
  float* v = state_at("exp_avg_sq", begin);
  const size_t n = end - begin;
  if (std::abs(s.w) < 0.5f) {
    RunBlocks(n, values + begin, grads + begin, m, v,
              [&s](float* p, const float* g, float* mm, float* vv) {
                AdamWBlock<true>(s, p, g, mm, vv);
              });
  } else {
    RunBlocks(n, values + begin, grads + begin, m, v,
              [&s](float* p, const float* g, float* mm, float* vv) {
                AdamWBlock<false>(s, p, g, mm, vv);
              });
  }
}

Sgd::Sgd(const OptimizerConfig& config, size_t num_elements, ThreadPool* pool, size_t shard_begin,
         size_t shard_end)
    : Optimizer(config, num_elements,
                config.momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                                     : std::vector<std::string>{},
                pool, shard_begin, shard_end) {}

void Sgd::Update(const UpdateArgs& args, bool decay, size_t begin, size_t end, float* values,
                 const float* grads) {
  const OptimizerConfig& c = config();
  SgdScalars s;
  s.grad_scale = args.grad_scale;
  s.weight_decay = static_cast<float>(c.weight_decay);
  s.momentum = static_cast<float>(c.momentum);
  s.neg_lr = static_cast<float>(-args.lr);
  const bool with_decay = decay && c.weight_decay != 0;
  const bool with_momentum = c.momentum != 0;
  float* buf = with_momentum ? state_at("momentum_buffer", begin) : nullptr;
  const size_t n = end - begin;
  auto run = [&]<bool kDecay, bool kMomentum>() {
    RunBlocks(n, values + begin, grads + begin, buf, nullptr,
              [&s](float* p, const float* g, float* b, float*) {
                SgdBlock<kDecay, kMomentum>(s, p, g, b);
              });
  };
  if (with_decay && with_momentum) {
    run.operator()<true, true>();
  } else if (with_decay) {
    run.operator()<true, false>();
  } else if (with_momentum) {
    run.operator()<false, true>();
  } else {
    run.operator()<false, false>();
  }
}

const std::map<std::string, OptimizerFactory>& OptimizerRegistry() {
  static const auto* kRegistry = new std::map<std::string, OptimizerFactory>{
      {"adamw",
       [](const OptimizerConfig& c, size_t n, ThreadPool* pool, size_t begin,
          size_t end) -> std::unique_ptr<Optimizer> {
         return std::make_unique<AdamW>(c, n, pool, begin, end);
       }},
      {"sgd",
       [](const OptimizerConfig& c, size_t n, ThreadPool* pool, size_t begin, size_t end)
           -> std::unique_ptr<Optimizer> { return std::make_unique<Sgd>(c, n, pool, begin, end); }},
  };
  return *kRegistry;
}

StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerConfig& config,
                                                     size_t num_elements, ThreadPool* pool,
                                                     size_t shard_begin, size_t shard_end) {
  LAMINAR_RETURN_IF_ERROR(config.Validate());
  shard_end = std::min(shard_end, num_elements);
  if (shard_begin > shard_end) {
    return InvalidArgumentError("optimizer shard [" + std::to_string(shard_begin) + ", " +
                                std::to_string(shard_end) + ") is empty or reversed");
  }
  return OptimizerRegistry().at(config.name)(config, num_elements, pool, shard_begin, shard_end);
}

}  // namespace laminar::trainer
