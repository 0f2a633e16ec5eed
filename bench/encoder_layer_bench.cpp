// bench/encoder_layer_bench.cpp — one encoder layer of the base model (paper §3.1, Table 3:
// D=512, h=8, d_ff=2048, post-norm, ReLU) on B=8, T=128, float32: forward in eval mode under
// NoGradGuard, and forward+backward in training mode (dropout 0.1 active), gradients of every
// parameter; and forward+backward in bf16 mixed precision (attn/ops/precision.h: the products on
// bf16 operands with float32 sums, as `attn train --precision bf16`); and the inference forward
// with the layer's weights quantized (nn/quantize.h: bf16 on `vdpbf16ps`, int8 on VNNI, as a
// folder from `attn quantize` runs). Twin: `torch_bench.py` (nn.TransformerEncoderLayer;
// torch.autocast for bf16). Not here: masks, the stack.
#include "attn/core/autograd.h"
#include "attn/nn/encoder.h"
#include "attn/nn/quantize.h"
#include "attn/ops/precision.h"
#include "bench_common.h"

namespace attn::bench {
namespace {

constexpr int64_t kB = 8, kT = 128;

nn::LayerOptions base_layer() {
  nn::LayerOptions o;  // the defaults are the paper's base layer
  o.d_model = 512;
  o.n_heads = 8;
  o.d_ff = 2048;
  o.dropout = 0.1;
  o.attention_dropout = 0.1;
  return o;
}

void encoder_layer_forward(benchmark::State& state) {
  Rng rng(0);
  nn::EncoderLayer layer(base_layer(), rng);
  layer.eval();
  const Tensor x = random_tensor({kB, kT, 512}, 1);  // [B, T, D]
  NoGradGuard no_grad;
  for (auto _ : state) {
    const Tensor y = layer.forward(x);  // [B, T, D]
    benchmark::DoNotOptimize(y.data<float>());
  }
}

void forward_quantized(benchmark::State& state, Quantization q) {
  Rng rng(0);
  nn::EncoderLayer layer(base_layer(), rng);
  layer.eval();
  nn::quantize_module(layer, q);
  const Tensor x = random_tensor({kB, kT, 512}, 1);  // [B, T, D]
  NoGradGuard no_grad;
  for (auto _ : state) {
    const Tensor y = layer.forward(x);  // [B, T, D]
    benchmark::DoNotOptimize(y.data<float>());
  }
}

void encoder_layer_forward_bf16_weights(benchmark::State& state) { forward_quantized(state, Quantization::BF16); }
void encoder_layer_forward_int8_weights(benchmark::State& state) { forward_quantized(state, Quantization::Int8); }

void forward_backward(benchmark::State& state, Precision precision) {
  Rng rng(0);
  nn::EncoderLayer layer(base_layer(), rng);
  layer.train();
  const Tensor x = random_tensor({kB, kT, 512}, 1);   // [B, T, D]
  const Tensor dy = random_tensor({kB, kT, 512}, 2);  // [B, T, D]
  const PrecisionGuard guard(precision);
  for (auto _ : state) {
    const Tensor y = layer.forward(x);  // [B, T, D]
    y.backward(dy);
    benchmark::DoNotOptimize(layer.parameters().front().grad().data<float>());
    layer.zero_grad();
  }
}

void encoder_layer_forward_backward(benchmark::State& state) { forward_backward(state, Precision::F32); }
void encoder_layer_forward_backward_bf16(benchmark::State& state) { forward_backward(state, Precision::BF16); }

BENCHMARK(encoder_layer_forward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(encoder_layer_forward_bf16_weights)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(encoder_layer_forward_int8_weights)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(encoder_layer_forward_backward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(encoder_layer_forward_backward_bf16)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace attn::bench

ATTN_BENCH_MAIN()
