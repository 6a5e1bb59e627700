// The quantized matmul kernels of quant_gemm_x86.inc built for AVX-512 VNNI (vpdpbusd on 256-bit
// vectors with AVX512VL; on 512-bit ones for the GGUF row groups).
#define LAMINAR_QUANT_NS avx512vnni
#define LAMINAR_QUANT_VNNI 1
#include "kernels/cpu/quant_gemm_x86.inc"
