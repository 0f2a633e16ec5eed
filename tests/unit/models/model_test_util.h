// Shared helpers for the model tests: a tiny config per family and token-id tensors.
#pragma once

#include <string>
#include <vector>

#include "attn/models/config.h"
#include "attn/nn/module.h"
#include "attn/ops/ops.h"

namespace attn::models::test_util {

// D=8, 2 heads, 1+1 layers, d_ff 16, vocabulary 7 (PAD 0, BOS 1, EOS 2), no dropout, f64.
inline ModelConfig tiny(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_encoder_layers = 1;
  c.n_decoder_layers = 1;
  c.d_ff = 16;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 16;
  c.src_vocab_size = 7;
  c.tgt_vocab_size = 7;
  c.dtype = DType::F64;
  c.seed = 42;
  return c;
}

// Smaller still for float64 gradient checks (every parameter element is perturbed twice):
// D=4, 2 heads, d_ff 6, vocabulary 5, max_len 8.
inline ModelConfig gradcheck_sized(Arch arch) {
  ModelConfig c = tiny(arch);
  c.d_model = 4;
  c.d_ff = 6;
  c.src_vocab_size = c.tgt_vocab_size = 5;
  c.max_len = 8;
  return c;
}

inline Tensor ids(const std::vector<int64_t>& values, int64_t B, int64_t T) {
  return Tensor::from_vector<int64_t>(values, {B, T});
}

inline std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [n, t] : m.named_parameters()) out.push_back(n);
  return out;
}

// Every parameter's gradient after one backward; returns the names of those that stayed zero.
inline std::vector<std::string> params_without_gradient(const nn::Module& m) {
  std::vector<std::string> missing;
  for (auto& [n, p] : m.named_parameters()) {
    bool nonzero = false;
    if (p.grad().defined())
      for (double g : p.grad().to_vector<double>()) nonzero = nonzero || g != 0.0;
    if (!nonzero) missing.push_back(n);
  }
  return missing;
}

}  // namespace attn::models::test_util
