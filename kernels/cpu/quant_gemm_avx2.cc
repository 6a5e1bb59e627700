// The quantized matmul kernels of quant_gemm_x86.inc built for AVX2 (vpmaddubsw).
#define LAMINAR_QUANT_NS avx2
#define LAMINAR_QUANT_VNNI 0
#include "kernels/cpu/quant_gemm_x86.inc"
