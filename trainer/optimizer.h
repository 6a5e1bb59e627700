// Optimizers over a ParameterSet (AdamW, SGD with optional momentum), global-norm gradient clipping
// and learning-rate schedules as pure functions of the step. A step whose loss or gradient is not
// finite is skipped and counted (docs/architecture.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "trainer/parameters.h"

namespace laminar::trainer {

// Hyper-parameters. Names follow verl's `actor.optim` section (lr, betas, weight_decay, clip_grad,
// lr_warmup_steps, min_lr_ratio, num_cycles, total_training_steps).
struct OptimizerConfig {
  std::string name = "adamw";                     // a key of OptimizerRegistry(): "adamw", "sgd"
  double lr = 1e-6;                               // peak learning rate (the schedule multiplies it)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW only
  // AdamW: decoupled decay, p *= 1 - lr * weight_decay (Loshchilov & Hutter 2019, Alg. 2 line 12).
  // SGD: L2 added to the gradient, g += weight_decay * p (torch.optim.SGD). Either way only
  // parameters with ParamInfo::decay.
  double weight_decay = 0.01;
  double grad_clip = 1.0;                // max global L2 norm of the gradient; 0 = no clipping
  std::string lr_schedule = "constant";  // a key of LrScheduleRegistry()
  int64_t warmup_steps = 0;              // linear warm-up from 0 over this many steps
  int64_t total_steps = 0;               // cosine: the step where the decay ends
  double min_lr_ratio = 0;               // cosine: floor, as a fraction of lr, in [0, 1]
  double num_cycles = 0.5;               // cosine: 0.5 = one half-wave from lr down to the floor
  double momentum = 0;                   // SGD only, in [0, 1); 0 = plain SGD, no state

  // InvalidArgument naming the field: unknown name or schedule (listing the valid ones), lr < 0,
  // betas outside [0, 1), eps <= 0, weight_decay / grad_clip / warmup_steps < 0, min_lr_ratio
  // outside [0, 1], cosine without total_steps > warmup_steps, constant with warmup_steps > 0.
  Status Validate() const;
  // Every field, by the names above.
  nlohmann::json ToJson() const;
  // The inverse of ToJson (absent keys keep their defaults). InvalidArgument naming a mistyped or
  // unknown key; the result is Validate()d.
  static StatusOr<OptimizerConfig> FromJson(const nlohmann::json& json);
};

// ---------------------------------------------------------------------------------------------
// Learning-rate schedules: lr(step) = config.lr * multiplier(step). `step` counts the schedule's
// updates from 0 (the first update uses step 0), as torch's LambdaLR passes `last_epoch`.
//   "constant"              1
//   "constant_with_warmup"  step / warmup_steps while step < warmup_steps, then 1
//                           (transformers get_constant_schedule_with_warmup)
//   "cosine"                the same warm-up, then with p = (step - warmup) / (total - warmup)
//                           clamped to [0, 1]:
//                           max(min_lr_ratio, (1+r)/2 + (1-r)/2 * cos(2 pi num_cycles p)), r =
//                           min_lr_ratio (verl utils/torch_functional.py
//                           get_cosine_schedule_with_warmup). verl does not clamp p, so past
//                           total_steps its lr would rise again; ours stays at the floor.
using LrScheduleFn = std::function<double(const OptimizerConfig& config, int64_t step)>;
const std::map<std::string, LrScheduleFn>& LrScheduleRegistry();

// config.lr times the multiplier of config.lr_schedule at `step` (>= 0). The config must be valid
// (CHECK-fails on an unknown schedule).
double LearningRateAt(const OptimizerConfig& config, int64_t step);

// ---------------------------------------------------------------------------------------------
// Gradient clipping, as torch.nn.utils.clip_grad_norm_ (one group, L2 norm).

// sqrt(sum g^2) over `grads`, accumulated in f64 in fixed blocks (the same result whatever
// `pool`, which may be null). Infinite or NaN when any element is.
double GlobalGradNorm(std::span<const float> grads, ThreadPool* pool = nullptr);

// The factor clip_grad_norm_ scales the gradient by: min(1, max_norm / (norm + 1e-6)); 1 when
// max_norm is 0 (off). `norm` must be finite.
double ClipCoefficient(double norm, double max_norm);

// Scales `grads` in place so their global norm is at most `max_norm` (to within the 1e-6 torch
// adds to the norm) and returns the norm before clipping. A non-finite norm is returned without
// touching `grads`. max_norm 0: only the norm is computed.
double ClipGradNorm(std::span<float> grads, double max_norm, ThreadPool* pool = nullptr);

// ---------------------------------------------------------------------------------------------

struct StepResult {
  bool applied = false;  // false: skipped (non-finite loss or gradient), nothing changed
  double grad_norm = 0;  // global L2 norm of the gradient before clipping (NaN/Inf when skipped
                         // for a non-finite gradient)
  double lr = 0;         // learning rate of this step (also reported when skipped)
};

// The interface every optimizer implements. State: the config, counters, and named f32 buffers of
// num_elements() each (element i belongs to the same parameter as ParameterSet::values()[i]),
// named as torch's optimizer state ("exp_avg", "exp_avg_sq", "momentum_buffer"). Under ZeRO-1
// (SetShard) the buffers hold one shard [shard_begin(), shard_end()) of the elements: buffer
// element j belongs to values()[shard_begin() + j]. Owns its buffers; borrows the optional
// ThreadPool. Not thread-safe.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of params->values() from params->grads(), which must have num_elements()
  // elements (CHECK). `lr_step` is the schedule's step (LearningRateAt): the caller's count of
  // training steps, so several optimizer steps per global step can share one lr, as verl steps its
  // scheduler once per training step. `loss` is only checked for finiteness (pass 0 if unknown).
  // The gradient's global norm is computed (f64); if it or `loss` is not finite the step is
  // skipped: values, buffers and step() untouched, skipped_steps() + 1, applied = false. Otherwise
  // the gradient is scaled by ClipCoefficient(norm, grad_clip) (the update reads it scaled;
  // params->grads() itself is left as it was) and the update is applied, step() + 1.
  // Sharded (SetShard): only the shard's elements are updated; the gradient's norm is still over
  // all of them.
  StepResult Step(ParameterSet* params, int64_t lr_step, double loss = 0.0);

  // ZeRO-1: keeps state for, and updates, elements [begin, end) only (a data-parallel rank's shard;
  // the caller gathers the other shards' values after each applied step). The buffers become the
  // shard's, zero (construction sizes them so). CHECK: begin <= end <= num_elements().
  // Checkpoints (trainer/checkpoint.h) take unsharded optimizers only.
  void SetShard(size_t begin, size_t end);
  size_t shard_begin() const { return shard_begin_; }
  size_t shard_end() const { return shard_end_; }
  // The bytes of the state buffers this optimizer holds (its shard's when sharded).
  size_t state_bytes() const;

  const OptimizerConfig& config() const { return config_; }
  size_t num_elements() const { return num_elements_; }
  int64_t step() const { return step_; }                    // updates applied (Adam's t)
  int64_t skipped_steps() const { return skipped_steps_; }  // non-finite steps skipped

  // Names of the state buffers, sorted (empty for plain SGD).
  std::vector<std::string> buffer_names() const;
  // A state buffer (CHECK-fails on an unknown name). The mutable form is for checkpoint loading.
  std::span<const float> buffer(const std::string& name) const;
  std::span<float> mutable_buffer(const std::string& name);
  // Sets the counters (checkpoint loading). CHECK: both >= 0.
  void RestoreCounters(int64_t step, int64_t skipped_steps);

 protected:
  // Buffers for elements [shard_begin, min(shard_end, num_elements)) (SetShard), zero.
  Optimizer(const OptimizerConfig& config, size_t num_elements,
            const std::vector<std::string>& buffer_names, ThreadPool* pool, size_t shard_begin,
            size_t shard_end);

  // What one applied step needs, fixed before the element loop.
  struct UpdateArgs {
    double lr = 0;         // this step's learning rate
    int64_t t = 0;         // step() after this update (1 for the first)
    float grad_scale = 1;  // the clip coefficient, applied as g * grad_scale in f32
  };
  // Applies the update to elements [begin, end) of the flat buffers, all inside one parameter
  // whose ParamInfo::decay is `decay`. Called concurrently on disjoint ranges.
  virtual void Update(const UpdateArgs& args, bool decay, size_t begin, size_t end, float* values,
                      const float* grads) = 0;

  // The state of element `begin` (an index into values()) of buffer `name`.
  float* state_at(const std::string& name, size_t begin) {
    return mutable_buffer(name).data() + (begin - shard_begin_);
  }

 private:
  OptimizerConfig config_;
  size_t num_elements_ = 0;
  size_t shard_begin_ = 0, shard_end_ = 0;  // all elements unless SetShard
  std::map<std::string, std::vector<float>> buffers_;
  ThreadPool* pool_ = nullptr;
  int64_t step_ = 0;
  int64_t skipped_steps_ = 0;
};

// AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Algorithm 2) with the
// arithmetic of torch.optim.AdamW's single-tensor path, in f32 per element and in this order:
//   p = p * (1 - lr*wd)                       (decay params only)
//   m = m + w * (g - m), w = 1-b1             (torch lerp_; when w >= 0.5: g - (g-m) * (1-w))
//   v = v * b2 + (1-b2) * g * g
//   p = p + (-lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// with the scalars computed in f64 and rounded to f32 once, as PyTorch does with Python floats.
// PyTorch's vectorized CPU kernels fuse some multiply-adds (lerp), so a PyTorch run agrees with
// this to the rounding of the operands (|dm| ~ 1e-7 |g|), not always bit for bit; runs of this
// code are bit-reproducible whatever the thread pool. Buffers: "exp_avg" (m), "exp_avg_sq" (v).
class AdamW final : public Optimizer {
 public:
  // [shard_begin, shard_end): the elements it keeps state for (all by default; SetShard).
  AdamW(const OptimizerConfig& config, size_t num_elements, ThreadPool* pool = nullptr,
        size_t shard_begin = 0, size_t shard_end = SIZE_MAX);

 private:
  void Update(const UpdateArgs& args, bool decay, size_t begin, size_t end, float* values,
              const float* grads) override;
};

// SGD as torch.optim.SGD (dampening 0, no Nesterov), in f32 per element:
//   g = g + wd * p                            (decay params only, when weight_decay > 0)
//   buf = momentum * buf + g; g = buf         (when momentum > 0; buffer "momentum_buffer")
//   p = p + (-lr) * g
// A zero initial buffer gives torch's first step (buf = g) exactly.
class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& config, size_t num_elements, ThreadPool* pool = nullptr,
      size_t shard_begin = 0, size_t shard_end = SIZE_MAX);

 private:
  void Update(const UpdateArgs& args, bool decay, size_t begin, size_t end, float* values,
              const float* grads) override;
};

using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(
    const OptimizerConfig& config, size_t num_elements, ThreadPool* pool, size_t shard_begin,
    size_t shard_end)>;
// "adamw" -> AdamW, "sgd" -> Sgd.
const std::map<std::string, OptimizerFactory>& OptimizerRegistry();

// The optimizer config.name names, for `num_elements` parameters (ParameterSet::num_elements()),
// its buffers zero: for elements [shard_begin, shard_end) only (ZeRO-1, SetShard; shard_end is
// capped at num_elements), all of them by default. `pool` (may be null, borrowed) splits the
// element loops. Errors: Validate()'s (an unknown name is InvalidArgument listing the registered
// names); InvalidArgument for shard_begin > shard_end.
StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerConfig& config,
                                                     size_t num_elements,
                                                     ThreadPool* pool = nullptr,
                                                     size_t shard_begin = 0,
                                                     size_t shard_end = SIZE_MAX);

}  // namespace laminar::trainer
