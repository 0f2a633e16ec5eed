// bench/kernels_bench.cpp — the vector kernels per ISA (scalar, AVX2, AVX-512; the first
// argument), through the kernel entry points the ops call (threads and all), at the sizes
// where the time goes: softmax over attention rows (B*H*T rows of T), layer norm of the base
// model (B*T = 1024 rows of D = 512) and of the demo (576 rows of 64), GELU over the base
// FFN's activations, cross entropy of the demo's logits, dropout (and its mask draw alone over
// a million elements) and Adam over 1M parameters.
// Our side only: PyTorch comparisons of whole layers live in torch_bench.py / compare.py.
#include <memory>
#include <vector>

#include "bench_common.h"
#include "kernels/adam.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/layer_norm.h"
#include "kernels/simd/isa.h"
#include "kernels/softmax.h"

namespace attn::bench {
namespace {

using kernels::simd::Isa;

// Makes the benchmark's ISA (range(0)) active for its lifetime; false (and the run skipped)
// when this CPU lacks it.
bool use_isa(benchmark::State& state, std::unique_ptr<kernels::simd::IsaGuard>& guard) {
  const Isa isa = static_cast<Isa>(state.range(0));
  if (!kernels::simd::isa_supported(isa)) {
    state.SkipWithError("ISA not supported by this CPU");
    return false;
  }
  guard = std::make_unique<kernels::simd::IsaGuard>(isa);
  state.SetLabel(kernels::simd::isa_name(isa));
  return true;
}

std::vector<float> random_floats(int64_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

void bytes(benchmark::State& state, int64_t elements, int arrays) {
  state.SetBytesProcessed(state.iterations() * elements * arrays * static_cast<int64_t>(sizeof(float)));
}

void softmax_forward(benchmark::State& state) {
  std::unique_ptr<kernels::simd::IsaGuard> guard;
  if (!use_isa(state, guard)) return;
  const int64_t rows = state.range(1), cols = state.range(2);
  const auto x = random_floats(rows * cols, 1, 3.0);  // [rows, cols]
  std::vector<float> y(x.size());                     // [rows, cols]
  for (auto _ : state) {
    kernels::softmax_forward<float>(y.data(), x.data(), rows, cols);
    benchmark::ClobberMemory();
  }
  bytes(state, rows * cols, 2);
}

void softmax_backward(benchmark::State& state) {
  std::unique_ptr<kernels::simd::IsaGuard> guard;
  if (!use_isa(state, guard)) return;
  const int64_t rows = state.range(1), cols = state.range(2);
  const auto x = random_floats(rows * cols, 1, 3.0), dy = random_floats(rows * cols, 2);
  std::vector<float> y(x.size()), dx(x.size(), 0.0f);  // [rows, cols]
  kernels::softmax_forward<float>(y.data(), x.data(), rows, cols);
  for (auto _ : state) {
    kernels::softmax_backward<float>(dx.data(), dy.data(), y.data(), rows, cols);
    benchmark::ClobberMemory();
  }
  bytes(state, rows * cols, 4);
}

void layer_norm_forward(benchmark::State& state) {
  std::unique_ptr<kernels::simd::IsaGuard> guard;
  if (!use_isa(state, guard)) return;
  const int64_t rows = state.range(1), D = state.range(2);
  const auto x = random_floats(rows * D, 1), w = random_floats(D, 2), b = random_floats(D, 3);
  std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(mean.size());
  for (auto _ : state) {
    kernels::layer_norm_forward<float>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows,
                                       D, 1e-5);
    benchmark::ClobberMemory();
  }
  bytes(state, rows * D, 2);
}

void layer_norm_backward(benchmark::State& state) {
  std::unique_ptr<kernels::simd::IsaGuard> guard;
  if (!use_isa(state, guard)) return;
  const int64_t rows = state.range(1), D = state.range(2);
  const auto x = random_floats(rows * D, 1), w = random_floats(D, 2), b = random_floats(D, 3);
  const auto dy = random_floats(rows * D, 4);
  std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(mean.size());
  kernels::layer_norm_forward<float>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, D,
                                     1e-5);
  std::vector<float> dx(x.size(), 0.0f), dw(static_cast<size_t>(D), 0.0f), db(dw.size(), 0.0f);
  for (auto _ : state) {
    kernels::layer_norm_backward<float>(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                                        mean.data(), rstd.data(), rows, D);
    benchmark::ClobberMemory();
  }
  bytes(state, rows * D, 3);
}

void gelu_forward(benchmark::State& state) {
  std::unique_ptr<kernels::simd::IsaGuard> guard;
  if (!use_isa(state, guard)) return;
  const int64_t n = state.range(1);
  const auto x = random_floats(n, 1, 2.0);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    if (state.range(2))
      kernels::gelu_tanh_forward<float>(y.data(), x.data(), n);
    else
      kernels::gelu_forward<float>(y.data(), x.data(), n);
    benchmark::ClobberMemory();
  }
  bytes(state, n, 2);
}

void gelu_backward(benchmark::State& state) {
  std::unique_ptr<kernels::simd::IsaGuard> guard;
  if (!use_isa(state, guard)) return;
  const int64_t n = state.range(1);
  const auto x = random_floats(n, 1, 2.0), dy = random_floats(n, 2);
  std::vector<float> dx(x.size(), 0.0f);
  for (auto _ : state) {
    if (state.range(2))
      kernels::gelu_tanh_backward<float>(dx.data(), dy.data(), x.data(), n);
    else
      kernels::gelu_backward<float>(dx.data(), dy.data(), x.data(), n);
    benchmark::ClobberMemory();
  }
  bytes(state, n, 3);
}

void cross_entropy_forward_backward(benchmark::State& state) {
  std::unique_ptr<kernels::simd::IsaGuard> guard;
  if (!use_isa(state, guard)) return;
  const int64_t N = state.range(1), V = state.range(2);
  const auto logits = random_floats(N * V, 1, 3.0);  // [N, V]
  std::vector<int64_t> targets(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) targets[static_cast<size_t>(n)] = (n * 7) % V;
  std::vector<float> losses(static_cast<size_t>(N)), lse(losses.size()), dlogits(logits.size(), 0.0f);
  for (auto _ : state) {
    kernels::cross_entropy_forward<float>(losses.data(), lse.data(), logits.data(), targets.data(), N, V, -100,
                                          0.1);
    kernels::cross_entropy_backward<float>(dlogits.data(), lse.data(), logits.data(), targets.data(), N, V, -100,
                                           0.1, 1.0f / static_cast<float>(N));
    benchmark::ClobberMemory();
  }
  bytes(state, N * V, 3);
}

void adam(benchmark::State& state) {
  std::unique_ptr<kernels::simd::IsaGuard> guard;
  if (!use_isa(state, guard)) return;
  const int64_t n = state.range(1);
  auto p = random_floats(n, 1), g = random_floats(n, 2);
  std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f);
  int64_t k = 0;
  for (auto _ : state) {
    const auto s = kernels::adam_step_scalars<float>(1e-4, ++k, 0.9, 0.98, 1e-9, 0.0, true);
    kernels::adam_update<float>(p.data(), m.data(), v.data(), g.data(), n, s);
    benchmark::ClobberMemory();
  }
  bytes(state, n, 7);  // p, m, v read and written, g read
}

// The mask draw (serial, from one Rng) and the scaling, then the backward (the writing one,
// as the op runs it).
void dropout_forward_backward(benchmark::State& state) {
  std::unique_ptr<kernels::simd::IsaGuard> guard;
  if (!use_isa(state, guard)) return;
  const int64_t n = state.range(1);
  const auto x = random_floats(n, 1), dout = random_floats(n, 2);
  std::vector<float> out(x.size()), dx(x.size(), 0.0f);
  std::vector<uint8_t> keep(x.size());
  Rng rng(3);
  for (auto _ : state) {
    kernels::dropout_forward<float>(out.data(), keep.data(), x.data(), n, 0.1, rng);
    kernels::dropout_backward_write<float>(dx.data(), dout.data(), keep.data(), 1.0f / 0.9f, n);
    benchmark::ClobberMemory();
  }
  bytes(state, n, 4);
}

// The mask draw alone: one serial xoshiro256** step per four elements, then the ISA's
// field-to-byte kernel. Bytes counted are the mask's.
void dropout_mask(benchmark::State& state) {
  std::unique_ptr<kernels::simd::IsaGuard> guard;
  if (!use_isa(state, guard)) return;
  const int64_t n = state.range(1);
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  Rng rng(3);
  for (auto _ : state) {
    kernels::dropout_mask(keep.data(), n, 0.1, rng);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n);
}

// Every case once per ISA: scalar (0), AVX2 (1), AVX-512 (2).
template <class F>
void per_isa(benchmark::internal::Benchmark* b, F sizes) {
  for (int64_t isa = 0; isa <= 2; ++isa) sizes(b, isa);
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(softmax_forward)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "rows", "cols"});
  per_isa(b, [](auto* bb, int64_t isa) { bb->Args({isa, 4 * 8 * 128, 128})->Args({isa, 4 * 8 * 64, 1024}); });
});
BENCHMARK(softmax_backward)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "rows", "cols"});
  per_isa(b, [](auto* bb, int64_t isa) { bb->Args({isa, 4 * 8 * 128, 128}); });
});
BENCHMARK(layer_norm_forward)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "rows", "D"});
  per_isa(b, [](auto* bb, int64_t isa) { bb->Args({isa, 1024, 512})->Args({isa, 576, 64}); });
});
BENCHMARK(layer_norm_backward)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "rows", "D"});
  per_isa(b, [](auto* bb, int64_t isa) { bb->Args({isa, 1024, 512})->Args({isa, 576, 64}); });
});
BENCHMARK(gelu_forward)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "n", "tanh"});
  per_isa(b, [](auto* bb, int64_t isa) { bb->Args({isa, 1024 * 2048, 0})->Args({isa, 1024 * 2048, 1}); });
});
BENCHMARK(gelu_backward)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "n", "tanh"});
  per_isa(b, [](auto* bb, int64_t isa) { bb->Args({isa, 1024 * 2048, 0})->Args({isa, 1024 * 2048, 1}); });
});
BENCHMARK(cross_entropy_forward_backward)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "N", "V"});
  per_isa(b, [](auto* bb, int64_t isa) { bb->Args({isa, 576, 13})->Args({isa, 2048, 8000}); });
});
BENCHMARK(dropout_forward_backward)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "n"});
  // The demo's [64, 9, 64] sub-layer outputs, and the base model's [8, 128, 512].
  per_isa(b, [](auto* bb, int64_t isa) { bb->Args({isa, 64 * 9 * 64})->Args({isa, 8 * 128 * 512}); });
});
BENCHMARK(dropout_mask)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "n"});
  per_isa(b, [](auto* bb, int64_t isa) { bb->Args({isa, 1000000}); });
});
BENCHMARK(adam)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa", "n"});
  per_isa(b, [](auto* bb, int64_t isa) { bb->Args({isa, 1 << 20}); });
});

}  // namespace
}  // namespace attn::bench

ATTN_BENCH_MAIN()
