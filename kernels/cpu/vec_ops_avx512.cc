// The vectorized ops of vec_ops_impl.inc at 16 lane(s) (avx512).
#define LAMINAR_VEC_WIDTH 16
#define LAMINAR_VEC_NS avx512
#include "kernels/cpu/vec_ops_impl.inc"
