// Runtime CPU feature detection: one binary runs AVX-512 paths where present, AVX2 otherwise.
#pragma once

#include <string>

namespace laminar::kernels::cpu {

enum class Isa { kScalar, kAvx2, kAvx512 };

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + FMA + F16C
  bool avx512 = false;       // AVX-512 F + BW + VL + DQ
  bool avx512_bf16 = false;  // vdpbf16ps
  bool avx512_vnni = false;  // vpdpbusd
  bool avx_vnni = false;
};

// Detected once (cpuid via the compiler's builtins).
const CpuFeatures& GetCpuFeatures();
// The best ISA available, capped by $LAMINAR_ISA (scalar|avx2|avx512) so tests can force a path.
Isa BestIsa();
std::string IsaName(Isa isa);

}  // namespace laminar::kernels::cpu
