// CPU feature detection.
#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>

namespace laminar::kernels::cpu {

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
    __builtin_cpu_init();
    // F16C (CPUID leaf 1, ECX bit 29) and AVX-VNNI (leaf 7 subleaf 1, EAX bit 4) read from CPUID
    // itself (Intel SDM vol. 2A, CPUID): clang's __builtin_cpu_supports knows neither.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
    const bool avx_vnni =
        __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 4)) != 0;
    c.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    c.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    c.avx512_vnni = c.avx512 && __builtin_cpu_supports("avx512vnni");
    c.avx512_bf16 = c.avx512 && __builtin_cpu_supports("avx512bf16");
    c.avx_vnni = c.avx2 && avx_vnni;  // the OS saves the AVX state (checked for avx2)
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
