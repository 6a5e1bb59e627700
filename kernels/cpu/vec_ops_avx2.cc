// The vectorized ops of vec_ops_impl.inc at 8 lane(s) (avx2).
#define LAMINAR_VEC_WIDTH 8
#define LAMINAR_VEC_NS avx2
#include "kernels/cpu/vec_ops_impl.inc"
