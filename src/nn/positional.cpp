// Positional encodings: the paper's sinusoids (§3.5) and a learned table.
// The sinusoids are evaluated in double, p / 10000^(2i/D) exactly as written, then cast.
#include "attn/nn/positional.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attn/nn/init.h"
#include "attn/ops/ops.h"

namespace attn::nn {

const char* positional_kind_name(PositionalKind kind) {
  switch (kind) {
    case PositionalKind::None: return "none";
    case PositionalKind::Sinusoidal: return "sinusoidal";
    case PositionalKind::Learned: return "learned";
    case PositionalKind::Rope: return "rope";
    case PositionalKind::Alibi: return "alibi";
  }
  return "?";
}

PositionalKind parse_positional_kind(const std::string& name) {
  if (name == "none") return PositionalKind::None;
  if (name == "sinusoidal") return PositionalKind::Sinusoidal;
  if (name == "learned") return PositionalKind::Learned;
  if (name == "rope") return PositionalKind::Rope;
  if (name == "alibi") return PositionalKind::Alibi;
  fail("positional", "unknown positional encoding '", name,
       "' (expected sinusoidal, learned, rope, alibi or none)");
}

Tensor sinusoidal_table(int64_t length, int64_t dim, DType dtype, int64_t offset) {
  ATTN_CHECK(length >= 0 && dim > 0 && offset >= 0, "sinusoidal_table", "bad length ", length,
             ", dim ", dim, " or offset ", offset);
  std::vector<double> pe(static_cast<size_t>(length * dim));  // [T, D]
  for (int64_t t = 0; t < length; ++t) {
    const double p = static_cast<double>(offset + t);
    for (int64_t j = 0; j < dim; ++j) {
      const int64_t two_i = j - (j % 2);  // columns 2i and 2i+1 share a frequency
      const double angle = p / std::pow(10000.0, static_cast<double>(two_i) / static_cast<double>(dim));
      pe[static_cast<size_t>(t * dim + j)] = (j % 2 == 0) ? std::sin(angle) : std::cos(angle);
    }
  }
  return Tensor::from_vector<double>(pe, {length, dim}).to(dtype);  // [T, D]
}

Tensor PositionalEncoding::forward(const Tensor& x, int64_t offset) const {
  ATTN_CHECK(x.dim() == 3 && x.size(2) == dim_, "PositionalEncoding", "expected x [B, T, ", dim_,
             "], got ", x.str());
  return add(x, table(x.size(1), offset));  // [B, T, D] + [T, D] -> [B, T, D]
}

Tensor PositionalEncoding::forward_at(const Tensor& x, const Tensor& positions) const {
  ATTN_CHECK(x.dim() == 3 && x.size(2) == dim_, "PositionalEncoding", "expected x [B, T, ", dim_, "], got ", x.str());
  ATTN_CHECK(positions.defined() && positions.dtype() == DType::I64 &&
                 positions.shape() == (Shape{x.size(0), x.size(1)}),
             "PositionalEncoding", "positions must be i64 [", x.size(0), ", ", x.size(1), "] like x ", x.str(), ", got ",
             positions.defined() ? positions.str() : "undefined");
  int64_t lo = 0, hi = -1;
  for (int64_t p : positions.to_vector<int64_t>()) {
    lo = std::min(lo, p);
    hi = std::max(hi, p);
  }
  ATTN_CHECK(lo >= 0, "PositionalEncoding", "positions must be >= 0, got ", lo);
  // table() checks the range (learned positions end at max_len); embedding() gathers the rows.
  return add(x, embedding(table(hi + 1, 0), positions));  // [B, T, D] + [B, T, D]
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t dim, DType dtype)
    : PositionalEncoding(dim), dtype_(dtype) {
  ATTN_CHECK(dim > 0, "SinusoidalPositionalEncoding", "dim must be positive, got ", dim);
  ATTN_CHECK(is_floating(dtype), "SinusoidalPositionalEncoding", "dtype must be f32 or f64");
}

Tensor SinusoidalPositionalEncoding::table(int64_t length, int64_t offset) const {
  ATTN_CHECK(length >= 0 && offset >= 0, "SinusoidalPositionalEncoding", "bad length ", length,
             " or offset ", offset);
  const int64_t need = offset + length;
  const int64_t have = cache_.defined() ? cache_.size(0) : 0;
  if (need > have) {
    // Grow geometrically so that step-by-step decoding does not recompute every step.
    cache_ = sinusoidal_table(std::max<int64_t>({need, 2 * have, 64}), dim_, dtype_);  // [L, D]
  }
  return cache_.slice(0, offset, need);  // [T, D]
}

LearnedPositionalEmbedding::LearnedPositionalEmbedding(int64_t max_len, int64_t dim, DType dtype,
                                                       Rng& rng, double init_std)
    : PositionalEncoding(dim), max_len_(max_len) {
  ATTN_CHECK(max_len > 0 && dim > 0, "LearnedPositionalEmbedding", "sizes must be positive, got max_len ",
             max_len, ", D ", dim);
  ATTN_CHECK(is_floating(dtype), "LearnedPositionalEmbedding", "dtype must be f32 or f64");
  weight_ = register_parameter("weight", Tensor::zeros({max_len_, dim_}, dtype));  // [max_len, D]
  normal_(weight_, 0.0, init_std, rng);
}

Tensor LearnedPositionalEmbedding::table(int64_t length, int64_t offset) const {
  ATTN_CHECK(length >= 0 && offset >= 0, "LearnedPositionalEmbedding", "bad length ", length,
             " or offset ", offset);
  ATTN_CHECK(offset + length <= max_len_, "LearnedPositionalEmbedding", "position ", offset + length - 1,
             " is beyond max_len ", max_len_, " (learned positions cover 0..", max_len_ - 1,
             "; use a larger max_len or sinusoidal positions)");
  return slice(weight_, 0, offset, offset + length);  // [T, D]
}

std::shared_ptr<PositionalEncoding> make_positional(PositionalKind kind, int64_t max_len, int64_t dim,
                                                    DType dtype, Rng& rng, double init_std) {
  switch (kind) {
    case PositionalKind::None:
    case PositionalKind::Rope:
    case PositionalKind::Alibi: return nullptr;  // none, or inside attention
    case PositionalKind::Sinusoidal: return std::make_shared<SinusoidalPositionalEncoding>(dim, dtype);
    case PositionalKind::Learned:
      return std::make_shared<LearnedPositionalEmbedding>(max_len, dim, dtype, rng, init_std);
  }
  return nullptr;
}

}  // namespace attn::nn
