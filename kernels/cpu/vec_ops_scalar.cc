// The vectorized ops of vec_ops_impl.inc at 1 lane(s) (scalar).
#define LAMINAR_VEC_WIDTH 1
#define LAMINAR_VEC_NS scalar
#include "kernels/cpu/vec_ops_impl.inc"
