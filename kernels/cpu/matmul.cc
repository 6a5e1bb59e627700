// oneDNN matmul. oneDNN caches primitives by descriptor, so creating one per call costs a hash
// lookup after the first call with a shape.
#include "kernels/cpu/matmul.h"

#include <dnnl.hpp>

#include <string>

namespace laminar::kernels::cpu {
namespace {

dnnl::engine& CpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

}  // namespace

Status MatMul(std::span<const float> x, std::span<const float> w, std::span<const float> bias,
              int64_t m, int64_t n, int64_t k, std::span<float> out) {
  if (static_cast<int64_t>(x.size()) != m * k || static_cast<int64_t>(w.size()) != n * k ||
      static_cast<int64_t>(out.size()) != m * n ||
      (!bias.empty() && static_cast<int64_t>(bias.size()) != n)) {
    return InvalidArgumentError("matmul: sizes do not match M=" + std::to_string(m) +
                                " N=" + std::to_string(n) + " K=" + std::to_string(k));
  }
  if (m == 0 || n == 0) return OkStatus();
  using dt = dnnl::memory::data_type;
  try {
    auto& engine = CpuEngine();
    dnnl::memory::desc src_md({m, k}, dt::f32, dnnl::memory::dims{k, 1});
    dnnl::memory::desc wei_md({k, n}, dt::f32, dnnl::memory::dims{1, k});  // [N, K] read as K x N
    dnnl::memory::desc dst_md({m, n}, dt::f32, dnnl::memory::dims{n, 1});
    dnnl::memory::desc bias_md;
    if (!bias.empty()) bias_md = dnnl::memory::desc({1, n}, dt::f32, dnnl::memory::dims{n, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, bias_md, dst_md), engine);
    dnnl::matmul prim(pd);
    dnnl::memory src(src_md, engine, const_cast<float*>(x.data()));
    dnnl::memory wei(wei_md, engine, const_cast<float*>(w.data()));
    dnnl::memory dst(dst_md, engine, out.data());
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    if (!bias.empty()) {
      args[DNNL_ARG_BIAS] = dnnl::memory(bias_md, engine, const_cast<float*>(bias.data()));
    }
    dnnl::stream stream(engine);
    prim.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    return InternalError(std::string("oneDNN matmul failed: ") + e.what());
  }
  return OkStatus();
}

}  // namespace laminar::kernels::cpu
