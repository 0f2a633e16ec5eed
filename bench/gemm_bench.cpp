// bench/gemm_bench.cpp — GFLOP/s of our GEMM path (kernels::gemm, the only BLAS caller) on
// float32 row-major products, against the machine's measured peak: a register-only loop of
// independent fused multiply-adds on every thread (AVX-512, else AVX2+FMA, chosen at run
// time), which no GEMM can beat. Twin: `torch_bench.py` (torch.mm on the same shapes).
// Also x W^T for the few rows of a decoding step (linear_rows), in the default and the
// batch-invariant mode. Not here: float64, other transposed operands, or the batched GEMM of
// attention.
#include <immintrin.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "attn/ops/batch_invariant.h"
#include "bench_common.h"
#include "kernels/gemm.h"
#include "kernels/quantized_gemm.h"

namespace attn::bench {
namespace {

// ---- GEMM ------------------------------------------------------------------------------

// C[M, N] = A[M, K] B[K, N], beta = 0; FLOPs = 2 M N K per call.
void gemm(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const Tensor a = random_tensor({M, K}, 1);  // [M, K]
  const Tensor b = random_tensor({K, N}, 2);  // [K, N]
  Tensor c = Tensor::zeros({M, N});           // [M, N]
  for (auto _ : state) {
    kernels::gemm<float>(false, false, M, N, K, 1.0f, a.data<float>(), K, b.data<float>(), N, 0.0f,
                         c.data<float>(), N);
    benchmark::ClobberMemory();
  }
  // A plain counter: compare.py divides it by the measured time.
  state.counters["flop"] = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
}

void gemm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K"});
  for (int64_t n : {256, 512, 1024, 2048, 4096}) b->Args({n, n, n});
  // The base encoder layer's products at B*T = 1024 rows: in-projection, FFN up and down.
  b->Args({1024, 1536, 512})->Args({1024, 2048, 512})->Args({1024, 512, 2048});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(gemm)->Apply(gemm_args);

// ---- x W^T for a few rows -----------------------------------------------------------------

// C[M, N] = A[M, K] W[N, K]^T, beta = 0: a linear layer on the M rows of one decoding step,
// through kernels::gemm (gemm_small_m up to kSmallMMaxRows rows, BLAS above; with invariant =
// 1, the batch-invariant mode's gemm_invariant for every M). A decoding step streams every layer's
// weight from memory (the base model's decoder holds about 90 MB of them), so the calls
// rotate over copies of W that together overflow the last-level cache (32 MiB here): a weight
// is not in cache when its turn comes. FLOPs = 2 M N K per call.
void linear_rows(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const bool invariant = state.range(3) != 0;
  constexpr int64_t kRotationBytes = int64_t{96} << 20;
  const int64_t copies = std::max<int64_t>(2, kRotationBytes / (N * K * 4));
  const Tensor a = random_tensor({M, K}, 1);  // [M, K]
  std::vector<Tensor> w;                      // copies x [N, K]
  for (int64_t i = 0; i < copies; ++i) w.push_back(random_tensor({N, K}, 2 + static_cast<uint64_t>(i)));
  Tensor c = Tensor::zeros({M, N});  // [M, N]
  BatchInvariantGuard mode(invariant);
  int64_t next = 0;
  for (auto _ : state) {
    kernels::gemm<float>(false, true, M, N, K, 1.0f, a.data<float>(), K, w[next].data<float>(), K, 0.0f,
                         c.data<float>(), N);
    benchmark::ClobberMemory();
    next = next + 1 == copies ? 0 : next + 1;
  }
  state.counters["flop"] = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  state.counters["GFLOPS"] = benchmark::Counter(state.counters["flop"] * static_cast<double>(state.iterations()) * 1e-9,
                                                benchmark::Counter::kIsRate);
}

void linear_rows_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "invariant"});
  // The base model's x W^T: in-projection (N = 3 D), FFN up and down.
  for (int64_t invariant : {0, 1})
    for (const auto& nk : {std::pair<int64_t, int64_t>{1536, 512}, {2048, 512}, {512, 2048}, {1024, 256}, {256, 1024}})
      for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32, 48, 64, 128, 256})
        b->Args({M, nk.first, nk.second, invariant});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(linear_rows)->Apply(linear_rows_args);

// The same products with reduced-precision weights (kernels/quantized_gemm.h): dtype 0 is
// float32 (kernels::gemm, as linear_rows), 1 int8 per-row weights with activations quantized
// per row at each call, 2 bf16 weights; each on the active ISA's path. The weights rotate over
// copies that overflow the last-level cache, as above, so the figures count the bytes of W that
// each dtype moves (4, 1 or 2 per weight).
void quantized_rows(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2), dtype = state.range(3);
  const int64_t bytes_per_weight = dtype == 0 ? 4 : dtype == 1 ? 1 : 2;
  constexpr int64_t kRotationBytes = int64_t{96} << 20;
  const int64_t copies = std::max<int64_t>(2, kRotationBytes / (N * K * bytes_per_weight));
  const Tensor a = random_tensor({M, K}, 1);  // [M, K]
  std::vector<Tensor> wf;                     // copies x [N, K] float32
  std::vector<std::vector<int8_t>> w8;        // copies x [N, K] int8
  std::vector<std::vector<float>> s8;         // copies x [N] scales
  std::vector<std::vector<uint16_t>> w16;     // copies x [N, K] bf16
  for (int64_t i = 0; i < copies; ++i) {
    const Tensor w = random_tensor({N, K}, 2 + static_cast<uint64_t>(i));
    if (dtype == 0) {
      wf.push_back(w);
    } else if (dtype == 1) {
      w8.emplace_back(static_cast<size_t>(N * K));
      s8.emplace_back(static_cast<size_t>(N));
      kernels::quantize_rows_s8(w8.back().data(), s8.back().data(), w.data<float>(), N, K, K);
    } else {
      w16.emplace_back(static_cast<size_t>(N * K));
      kernels::f32_to_bf16(w16.back().data(), w.data<float>(), N * K);
    }
  }
  Tensor c = Tensor::zeros({M, N});  // [M, N]
  int64_t next = 0;
  for (auto _ : state) {
    if (dtype == 0)
      kernels::gemm<float>(false, true, M, N, K, 1.0f, a.data<float>(), K, wf[next].data<float>(), K, 0.0f,
                           c.data<float>(), N);
    else if (dtype == 1)
      kernels::gemm_s8(M, N, K, a.data<float>(), K, w8[next].data(), s8[next].data(), nullptr, c.data<float>(), N);
    else
      kernels::gemm_bf16(M, N, K, a.data<float>(), K, w16[next].data(), nullptr, c.data<float>(), N);
    benchmark::ClobberMemory();
    next = next + 1 == copies ? 0 : next + 1;
  }
  state.SetLabel(dtype == 0 ? "f32" : dtype == 1 ? kernels::quant_path_name(kernels::int8_path())
                                                 : kernels::quant_path_name(kernels::bf16_path()));
  state.counters["flop"] = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  state.counters["GFLOPS"] = benchmark::Counter(state.counters["flop"] * static_cast<double>(state.iterations()) * 1e-9,
                                                benchmark::Counter::kIsRate);
  state.counters["weight_GBps"] = benchmark::Counter(
      static_cast<double>(N * K * bytes_per_weight) * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate);
}

void quantized_rows_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "dtype"});
  for (const auto& nk : {std::pair<int64_t, int64_t>{1536, 512}, {2048, 512}, {512, 2048}})
    for (int64_t M : {1, 4, 16, 64, 256, 1024})
      for (int64_t dtype : {0, 1, 2}) b->Args({M, nk.first, nk.second, dtype});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(quantized_rows)->Apply(quantized_rows_args);

// ---- peak: independent FMA chains, no memory traffic -------------------------------------

constexpr int64_t kFmaIters = 20'000'000;  // per thread per benchmark iteration

// 12 independent chains hide the 4-cycle FMA latency on two FMA pipes. Each step is
// a = a * x + y, which stays bounded (fixed point y / (1 - x) = 1).
__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iters) {
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
  __m512 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12  // unrolled, the 12 accumulators live in registers (not memory)
    for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], x, y);
  }
  __m512 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, a[j]);
  alignas(64) float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it
  _mm512_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iters) {
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.001f);
  __m256 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], x, y);
  }
  __m256 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, a[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

void fma_peak(benchmark::State& state) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx512 && !avx2) {
    state.SkipWithError("neither AVX-512 nor AVX2+FMA: no peak measured");
    return;
  }
  const int64_t lanes = avx512 ? 16 : 8;
  int threads = 1;
  for (auto _ : state) {
    float sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
#pragma omp single
      threads = omp_get_num_threads();
      sink += avx512 ? fma_chains_avx512(kFmaIters) : fma_chains_avx2(kFmaIters);
    }
    benchmark::DoNotOptimize(sink);
  }
  state.SetLabel(avx512 ? "avx512" : "avx2");
  // 2 FLOPs per lane per FMA, 12 chains, on every thread.
  state.counters["flop"] = 2.0 * 12.0 * static_cast<double>(lanes) * static_cast<double>(kFmaIters) * threads;
  state.counters["threads_used"] = threads;
}

BENCHMARK(fma_peak)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace attn::bench

ATTN_BENCH_MAIN()
