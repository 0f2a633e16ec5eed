// attn/nn/positional.h — positional information added to the embeddings (paper §3.5).
// Sinusoidal: PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)),
// for any length (computed in double, cached, grown on demand). Learned: a table
// "weight" [max_len, D] (as nn.Embedding), bounded by max_len with a clear error beyond it.
// RoPE and ALiBi are kinds too, but act inside attention (nn/attention.h, AttentionOptions),
// not on the embeddings: for them make_positional() builds nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "attn/core/rng.h"
#include "attn/nn/module.h"

namespace attn::nn {

enum class PositionalKind { None, Sinusoidal, Learned, Rope, Alibi };

// "none" / "sinusoidal" / "learned" / "rope" / "alibi", and back (an unknown name is an error).
const char* positional_kind_name(PositionalKind kind);
PositionalKind parse_positional_kind(const std::string& name);

// The sinusoidal table rows [offset, offset + length) for D features -> [length, D].
// For odd D the last column is a sine.
Tensor sinusoidal_table(int64_t length, int64_t dim, DType dtype, int64_t offset = 0);

// Common interface: positions [offset, offset + T) as a [T, D] tensor, and x + those.
class PositionalEncoding : public Module {
 public:
  // -> [length, D] for positions offset .. offset + length - 1.
  virtual Tensor table(int64_t length, int64_t offset = 0) const = 0;
  // x [B, T, D] -> x + table(T, offset) broadcast over B.
  Tensor forward(const Tensor& x, int64_t offset = 0) const;
  // x [B, T, D] -> x + the rows of the given positions, I64 [B, T] (each batch row its own
  // positions: left-padded prompts). Positions must be >= 0 (and < max_len when learned).
  Tensor forward_at(const Tensor& x, const Tensor& positions) const;
  int64_t dim() const { return dim_; }

 protected:
  explicit PositionalEncoding(int64_t dim) : dim_(dim) {}
  int64_t dim_;
};

// Fixed sinusoids; no parameters (nothing in the state_dict). The cache makes table()
// not thread-safe.
class SinusoidalPositionalEncoding : public PositionalEncoding {
 public:
  SinusoidalPositionalEncoding(int64_t dim, DType dtype);
  Tensor table(int64_t length, int64_t offset = 0) const override;

 private:
  DType dtype_;
  mutable Tensor cache_;  // [L, D], recomputed with a larger L when a longer range is asked for
};

// Learned absolute positions: "weight" [max_len, D], initialised N(0, init_std^2).
class LearnedPositionalEmbedding : public PositionalEncoding {
 public:
  LearnedPositionalEmbedding(int64_t max_len, int64_t dim, DType dtype, Rng& rng, double init_std);
  // Positions at or beyond max_len are an error naming the position and max_len.
  Tensor table(int64_t length, int64_t offset = 0) const override;

  const Tensor& weight() const { return weight_; }  // [max_len, D]
  int64_t max_len() const { return max_len_; }

 private:
  int64_t max_len_;
  Tensor weight_;
};

// True for the kinds added to the embeddings (sinusoidal, learned).
inline bool is_absolute(PositionalKind kind) {
  return kind == PositionalKind::Sinusoidal || kind == PositionalKind::Learned;
}

// The positional encoding a config names; nullptr for None, Rope and Alibi.
std::shared_ptr<PositionalEncoding> make_positional(PositionalKind kind, int64_t max_len, int64_t dim,
                                                    DType dtype, Rng& rng, double init_std);

}  // namespace attn::nn
