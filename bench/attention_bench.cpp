// bench/attention_bench.cpp — scaled dot-product attention (paper §3.2.1, Eq. 1) timed through
// the public op: forward (no grad) and forward+backward, float32, B=4, H=8, Dh=64,
// T in {128, 512, 1024, 2048, 4096}, causal and not. Twin: `torch_bench.py` (attention).
// Also the demo's training call (B=32 per batch shard, H=4, T=9, Dh=16, dropout 0.1, causal
// and not) on the short-sequence kernel and on the naive one it replaces (no PyTorch twin:
// the demo's whole training run is compared with PyTorch in compare.py).
// Not here: padding or float masks, float64, cross-attention (Tq != Tk).
#include "attn/core/autograd.h"
#include "attn/core/rng.h"
#include "attn/ops/attention.h"
#include "bench_common.h"
#include "ops/attention_impl.h"

namespace attn::bench {
namespace {

constexpr int64_t kB = 4, kH = 8, kDh = 64;

struct Qkv {
  Tensor q, k, v;
};

Qkv make_qkv(int64_t T, bool requires_grad) {
  Qkv x{random_tensor({kB, kH, T, kDh}, 1),   // [B, H, T, Dh]
        random_tensor({kB, kH, T, kDh}, 2),   // [B, H, T, Dh]
        random_tensor({kB, kH, T, kDh}, 3)};  // [B, H, T, Dh]
  if (requires_grad)
    for (Tensor* t : {&x.q, &x.k, &x.v}) t->set_requires_grad(true);
  return x;
}

void attention_forward(benchmark::State& state) {
  const int64_t T = state.range(0);
  SdpaOptions options;
  options.causal = state.range(1) != 0;
  const Qkv x = make_qkv(T, false);
  NoGradGuard no_grad;
  for (auto _ : state) {
    const SdpaResult r = scaled_dot_product_attention(x.q, x.k, x.v, options);  // [B, H, T, Dh]
    benchmark::DoNotOptimize(r.out.data<float>());
  }
}

void attention_forward_backward(benchmark::State& state) {
  const int64_t T = state.range(0);
  SdpaOptions options;
  options.causal = state.range(1) != 0;
  const Qkv x = make_qkv(T, true);
  const Tensor dout = random_tensor({kB, kH, T, kDh}, 4);  // [B, H, T, Dh]
  for (auto _ : state) {
    const SdpaResult r = scaled_dot_product_attention(x.q, x.k, x.v, options);  // [B, H, T, Dh]
    r.out.backward(dout);
    benchmark::DoNotOptimize(x.q.grad().data<float>());
    for (const Tensor& t : {x.q, x.k, x.v}) t.zero_grad();
  }
}

void attention_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "causal"});
  for (int64_t T : {128, 512, 1024, 2048, 4096})
    for (int64_t causal : {0, 1}) b->Args({T, causal});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(attention_forward)->Apply(attention_args);
BENCHMARK(attention_forward_backward)->Apply(attention_args);

// The demo's attention call in training, forward + backward, on kernel `impl` (1 = short,
// 0 = naive): q, k, v [32, 4, 9, 16], dropout 0.1 on the weights.
void short_attention_forward_backward(benchmark::State& state) {
  const bool causal = state.range(0) != 0;
  const detail::SdpaImpl impl = state.range(1) != 0 ? detail::SdpaImpl::Short : detail::SdpaImpl::Naive;
  const Shape shape = {32, 4, 9, 16};  // [B, H, T, Dh]
  Tensor q = random_tensor(shape, 1), k = random_tensor(shape, 2), v = random_tensor(shape, 3);
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  const Tensor dout = random_tensor(shape, 4);
  Rng rng(5);
  SdpaOptions options;
  options.causal = causal;
  options.dropout_p = 0.1;
  options.rng = &rng;
  for (auto _ : state) {
    const SdpaResult r = detail::scaled_dot_product_attention_impl(q, k, v, options, impl);  // [B, H, T, Dh]
    r.out.backward(dout);
    benchmark::DoNotOptimize(q.grad().data<float>());
    for (const Tensor& t : {q, k, v}) t.zero_grad();
  }
}

BENCHMARK(short_attention_forward_backward)
    ->ArgNames({"causal", "short"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace attn::bench

ATTN_BENCH_MAIN()
