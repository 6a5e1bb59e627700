// Decode-shape matmuls of every weight format against oneDNN s8 / bf16 (bench/gemm_bench.h).
#include "bench/gemm_bench.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "engine/llama_model.h"
#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/vec_ops.h"
#include "kernels/reference/quant.h"

namespace laminar::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kColdBytes = size_t{96} << 20;

// One way to compute out[M, N] = x[M, K] · W^T: its weight bytes per copy and a call on copy c.
struct Candidate {
  std::string name;
  size_t weight_bytes = 0;
  int64_t copies = 1;
  std::function<void(int64_t copy)> run;
  std::string error;  // set when the candidate cannot run here
};

int64_t CopiesFor(size_t bytes) {
  return std::max<int64_t>(
      1, static_cast<int64_t>((kColdBytes + bytes - 1) / std::max<size_t>(bytes, 1)));
}

std::vector<float> Gaussian(size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Raw ggml blocks with realistic scales (values do not change the speed).
std::vector<uint8_t> RandomBlocks(uint32_t type, int64_t n, int64_t k) {
  const size_t block_bytes = type == 3 ? 20 : 34;
  std::vector<uint8_t> raw(static_cast<size_t>(n * k / 32) * block_bytes);
  std::mt19937 rng(7);
  for (size_t b = 0; b < raw.size() / block_bytes; ++b) {
    uint8_t* p = raw.data() + b * block_bytes;
    const uint16_t d = FloatToHalf(0.01f), m = FloatToHalf(-0.05f);
    std::memcpy(p, &d, 2);
    const size_t header = type == 3 ? 4 : 2;
    if (type == 3) std::memcpy(p + 2, &m, 2);
    for (size_t i = header; i < block_bytes; ++i) p[i] = static_cast<uint8_t>(rng());
  }
  return raw;
}

// A oneDNN matmul with src/weights of `dt` (s8: u8 activations, s8 weights, per-channel output
// scales; bf16: both bf16), dst f32, weights in oneDNN's preferred layout (reordered once, as a
// user of oneDNN would), on OpenMP's `threads` threads.
Candidate OneDnnPeer(const std::string& name, dnnl::memory::data_type dt, int64_t m, int64_t n,
                     int64_t k, int threads) {
  using dtype = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  Candidate c;
  c.name = name;
  try {
    static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const bool s8 = dt == dtype::s8;
    dnnl::memory::desc src_md({m, k}, s8 ? dtype::u8 : dtype::bf16, tag::ab);
    dnnl::memory::desc wei_any({k, n}, s8 ? dtype::s8 : dtype::bf16, tag::any);
    dnnl::memory::desc dst_md({m, n}, dtype::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (s8) attr.set_output_scales(2, std::vector<float>(static_cast<size_t>(n), 0.01f));
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_any, dst_md), attr, engine);
    auto src = std::make_shared<dnnl::memory>(pd.src_desc(), engine);
    auto dst = std::make_shared<dnnl::memory>(pd.dst_desc(), engine);
    std::memset(src->get_data_handle(), 1, pd.src_desc().get_size());
    // Weights [K, N] viewed from [N, K] rows, reordered into the primitive's layout per copy.
    dnnl::memory::desc wei_user({k, n}, s8 ? dtype::s8 : dtype::bf16, dnnl::memory::dims{1, k});
    dnnl::memory user(wei_user, engine);
    std::memset(user.get_data_handle(), 3, wei_user.get_size());
    c.weight_bytes = pd.weights_desc().get_size();
    c.copies = CopiesFor(c.weight_bytes);
    auto weights = std::make_shared<std::vector<dnnl::memory>>();
    dnnl::stream stream(engine);
    for (int64_t i = 0; i < c.copies; ++i) {
      weights->emplace_back(pd.weights_desc(), engine);
      dnnl::reorder(user, weights->back()).execute(stream, user, weights->back());
    }
    stream.wait();
    auto prim = std::make_shared<dnnl::matmul>(pd);
    c.run = [prim, src, dst, weights, threads](int64_t copy) {
      omp_set_num_threads(threads);
      dnnl::stream s(engine);
      prim->execute(
          s, {{DNNL_ARG_SRC, *src}, {DNNL_ARG_WEIGHTS, (*weights)[copy]}, {DNNL_ARG_DST, *dst}});
      s.wait();
    };
  } catch (const dnnl::error& e) {
    c.error = std::string("oneDNN: ") + e.what();
  }
  return c;
}

// Seconds per call: the best of 3 rounds of at least `min_seconds`, cycling the copies.
double TimeCandidate(const Candidate& c, double min_seconds) {
  c.run(0);  // warm-up
  double best = 1e30;
  int64_t next = 0;
  for (int round = 0; round < 3; ++round) {
    int64_t calls = 0;
    const auto t0 = Clock::now();
    double elapsed = 0;
    do {
      c.run(next);
      next = (next + 1) % c.copies;
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < min_seconds);
    best = std::min(best, elapsed / static_cast<double>(calls));
  }
  return best;
}

}  // namespace

std::vector<GemmShape> SmolLM2GemmShapes() {
  return {{"q_proj", 576, 576},
          {"k_proj", 192, 576},
          {"gate_proj", 1536, 576},
          {"down_proj", 576, 1536},
          {"lm_head", 49152, 576}};
}

// Kept whole: one table row per (shape, M, format), each measured and printed where it is made.
StatusOr<nlohmann::json> BenchGemm(const std::vector<GemmShape>& shapes,
                                   const std::vector<int64_t>& ms, double dram_bytes_per_s,
                                   double min_seconds, int num_threads) {
  const int threads = num_threads > 0
                          ? num_threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads - 1);  // the caller works too, as in the engine
  ThreadPool* p = threads > 1 ? &pool : nullptr;
  nlohmann::json rows = nlohmann::json::array();
  // "bf16" is what the engine runs for bf16 weights on this CPU (kernels/cpu/bf16_dot.h).
  const bool bf16_dot = kernels::cpu::HasBF16Dot();
  std::fprintf(stderr, "bf16: %s\n",
               bf16_dot ? "bf16 activations (AVX512-BF16 dot product, oneDNN bf16 beyond 16 rows)"
                        : "f32 activations (bf16 weights widened in registers)");
  std::fprintf(stderr, "%-10s %4s %6s %6s  GOP/s: %8s %8s %8s %8s %8s %8s %10s %10s %10s\n",
               "shape", "M", "N", "K", "f32", "bf16", "w8a8", "w4a8", "q4_1", "q8_0", "onednn_s8",
               "onednn_bf16", "onednn_f32");
  for (const GemmShape& s : shapes) {
    const auto w = Gaussian(static_cast<size_t>(s.n * s.k), 1, 0.05f);
    LAMINAR_ASSIGN_OR_RETURN(const kernels::W8A8Weights w8, kernels::QuantizeW8A8(w, s.n, s.k));
    LAMINAR_ASSIGN_OR_RETURN(const kernels::W4A8Weights w4,
                             kernels::QuantizeW4A8(w, s.n, s.k, engine::kW4A8GroupSize));
    LAMINAR_ASSIGN_OR_RETURN(const kernels::GgufQuantWeights q41_rows,
                             kernels::PackGgufWeights(3, RandomBlocks(3, s.n, s.k), s.n, s.k));
    LAMINAR_ASSIGN_OR_RETURN(const kernels::GgufQuantWeights q80_rows,
                             kernels::PackGgufWeights(8, RandomBlocks(8, s.n, s.k), s.n, s.k));
    const kernels::cpu::GgufRowGroups q41 = kernels::cpu::PackGgufRowGroups(q41_rows);
    const kernels::cpu::GgufRowGroups q80 = kernels::cpu::PackGgufRowGroups(q80_rows);
    std::vector<uint16_t> wbf16(w.size());
    for (size_t i = 0; i < w.size(); ++i) wbf16[i] = FloatToBF16(w[i]);
    for (int64_t m : ms) {
      const auto x = Gaussian(static_cast<size_t>(m * s.k), 2, 1.f);
      std::vector<float> out(static_cast<size_t>(m * s.n));
      std::vector<Candidate> cands;
      // Each format's copies live as long as its candidate's closure.
      auto add = [&](const std::string& name, auto weights, size_t bytes, auto call) {
        Candidate c;
        c.name = name;
        c.weight_bytes = bytes;
        c.copies = CopiesFor(bytes);
        auto copies = std::make_shared<std::vector<decltype(weights)>>(c.copies, weights);
        c.run = [copies, call](int64_t i) { call((*copies)[i]); };
        cands.push_back(std::move(c));
      };
      add("f32", w, w.size() * 4, [&](const std::vector<float>& wc) {
        LAMINAR_CHECK_OK(kernels::cpu::MatMul(x, wc, {}, m, s.n, s.k, out, p));
      });
      add("bf16", wbf16, wbf16.size() * 2, [&](const std::vector<uint16_t>& wc) {
        kernels::cpu::MatMulBF16Weights(x, wc, {}, m, s.n, s.k, out, p, bf16_dot);
      });
      kernels::Int8Activations xq;
      add("w8a8", w8, w8.u.size() + 4 * w8.channel_scale.size(),
          [&](const kernels::W8A8Weights& wc) {
            kernels::QuantizeActivationsPerToken(x, m, s.k, &xq);
            kernels::cpu::MatMulW8A8(xq, wc, {}, out, p);
          });
      add("w4a8", w4,
          w4.q4.size() + w4.group_scale.size() + w4.group_offset.size() +
              4 * w4.channel_scale.size(),
          [&](const kernels::W4A8Weights& wc) {
            kernels::QuantizeActivationsPerToken(x, m, s.k, &xq);
            kernels::cpu::MatMulW4A8(xq, wc, {}, out, p);
          });
      kernels::Q8BlockActivations xb;
      for (const auto* g : {&q41, &q80}) {
        add(kernels::GgufQuantTypeName(g->type), *g, g->data.size(),
            [&](const kernels::cpu::GgufRowGroups& wc) {
              kernels::QuantizeActivationsQ8Blocks(x, m, s.k, &xb);
              kernels::cpu::MatMulGguf(xb, wc, {}, out, p);
            });
      }
      cands.push_back(OneDnnPeer("onednn_s8", dnnl::memory::data_type::s8, m, s.n, s.k, threads));
      cands.push_back(
          OneDnnPeer("onednn_bf16", dnnl::memory::data_type::bf16, m, s.n, s.k, threads));
      // oneDNN's f32 matmul as the engine would call it ("f32" is the batch-invariant kernel).
      add("onednn_f32", w, w.size() * 4, [&](const std::vector<float>& wc) {
        LAMINAR_CHECK_OK(kernels::cpu::OnednnMatMulF32(x, wc, {}, m, s.n, s.k, out, p));
      });
      nlohmann::json formats = nlohmann::json::object();
      std::string line;
      for (const Candidate& c : cands) {
        if (!c.error.empty()) {
          formats[c.name] = {{"error", c.error}};
          line += "         -";
          continue;
        }
        const double sec = TimeCandidate(c, min_seconds);
        const double gops = 2.0 * static_cast<double>(m * s.n * s.k) / sec / 1e9;
        nlohmann::json f = {
            {"s_per_call", sec}, {"gop_per_s", gops}, {"weight_bytes", c.weight_bytes}};
        if (m == 1)
          f["dram_fraction"] = static_cast<double>(c.weight_bytes) / sec / dram_bytes_per_s;
        formats[c.name] = f;
        char buf[32];
        std::snprintf(buf, sizeof(buf), " %8.1f", gops);
        line += buf;
      }
      std::fprintf(stderr, "%-10s %4lld %6lld %6lld       %s\n", s.name.c_str(),
                   static_cast<long long>(m), static_cast<long long>(s.n),
                   static_cast<long long>(s.k), line.c_str());
      rows.push_back({{"shape", s.name}, {"m", m}, {"n", s.n}, {"k", s.k}, {"formats", formats}});
    }
  }
  return nlohmann::json{{"isa", kernels::cpu::QuantIsaName(kernels::cpu::BestQuantIsa())},
                        {"threads", threads},
                        {"bf16_activations", bf16_dot},
                        {"dram_read_gb_per_s", dram_bytes_per_s / 1e9},
                        {"rows", rows}};
}

}  // namespace laminar::bench
