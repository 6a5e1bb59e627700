// CPU feature detection.
#include "kernels/cpu/cpu_features.h"

#include <cstdlib>

namespace laminar::kernels::cpu {

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    c.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    c.avx512_vnni = c.avx512 && __builtin_cpu_supports("avx512vnni");
    c.avx512_bf16 = c.avx512 && __builtin_cpu_supports("avx512bf16");
    c.avx_vnni = __builtin_cpu_supports("avxvnni");
    return c;
  }();
  return f;
}

Isa BestIsa() {
  const auto& f = GetCpuFeatures();
  Isa best = f.avx512 ? Isa::kAvx512 : f.avx2 ? Isa::kAvx2 : Isa::kScalar;
  if (const char* env = std::getenv("LAMINAR_ISA")) {
    std::string cap(env);
    if (cap == "scalar") return Isa::kScalar;
    if (cap == "avx2" && best == Isa::kAvx512) return Isa::kAvx2;
  }
  return best;
}

std::string IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace laminar::kernels::cpu
