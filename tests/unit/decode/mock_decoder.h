// A table- or hash-driven toy language model behind the IncrementalDecoder interface, for the
// search tests: the next-token log-probabilities are a pure function of (source tokens without
// PAD, target prefix including BOS), so brute-force references can call the same function.
// It checks the interface contract (shapes, reorder ranges) and records the rows of every step.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "attn/core/error.h"
#include "attn/core/tensor.h"
#include "attn/decode/incremental_decoder.h"

namespace attn::test {

// Logits of the next token given the source (PAD removed) and the prefix (BOS first).
using LogitsFn = std::function<std::vector<double>(const std::vector<int64_t>& src,
                                                   const std::vector<int64_t>& prefix)>;

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Pseudo-random logits in [-2, 2] hashed from (seed, source, prefix, token), plus eos_bias on EOS.
inline LogitsFn hash_logits(int64_t v, uint64_t seed, int64_t eos = -1, double eos_bias = 0.0) {
  return [=](const std::vector<int64_t>& src, const std::vector<int64_t>& prefix) {
    uint64_t h = mix64(seed);
    for (int64_t s : src) h = mix64(h ^ static_cast<uint64_t>(s + 17));
    h = mix64(h ^ 0xabcdefULL);
    for (int64_t p : prefix) h = mix64(h ^ static_cast<uint64_t>(p + 101));
    std::vector<double> logits(static_cast<size_t>(v));
    for (int64_t t = 0; t < v; ++t) {
      const uint64_t r = mix64(h ^ static_cast<uint64_t>(t * 7919 + 1));
      logits[t] = 4.0 * (static_cast<double>(r >> 11) * 0x1.0p-53 - 0.5);
      if (t == eos) logits[t] += eos_bias;
    }
    return logits;
  };
}

// log_softmax of logits, in double.
inline std::vector<double> log_softmax_of(const std::vector<double>& logits) {
  double m = -INFINITY;
  for (double x : logits) m = std::max(m, x);
  double z = 0;
  for (double x : logits) z += std::exp(x - m);
  std::vector<double> out;
  for (double x : logits) out.push_back(x - m - std::log(z));
  return out;
}

class MockDecoder : public decode::IncrementalDecoder {
 public:
  MockDecoder(int64_t v, LogitsFn logits, int64_t pad = -1, DType dtype = DType::F64)
      : v_(v), logits_(std::move(logits)), pad_(pad), dtype_(dtype) {}

  // The model: log-probabilities of the next token.
  std::vector<double> log_probs(const std::vector<int64_t>& src, const std::vector<int64_t>& prefix) const {
    return log_softmax_of(logits_(src, prefix));
  }

  void start(const Tensor& src_ids) override {
    EXPECT_EQ(src_ids.dtype(), DType::I64);
    EXPECT_EQ(src_ids.dim(), 2);
    const int64_t b = src_ids.size(0), s = src_ids.size(1);
    const auto ids = src_ids.to_vector<int64_t>();
    sources_.assign(static_cast<size_t>(b), {});
    rows_.clear();
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t j = 0; j < s; ++j)
        if (ids[i * s + j] != pad_) sources_[i].push_back(ids[i * s + j]);
      rows_.push_back(Row{i, {}});
    }
    ++starts;
    trace.clear();
  }

  Tensor step(const Tensor& last_tokens) override {
    const int64_t n = static_cast<int64_t>(rows_.size());
    EXPECT_EQ(last_tokens.dtype(), DType::I64);
    EXPECT_EQ(last_tokens.shape(), (Shape{n}));
    const auto last = last_tokens.to_vector<int64_t>();
    std::vector<int64_t> step_sources;
    std::vector<double> out;
    for (int64_t i = 0; i < n; ++i) {
      Row& r = rows_[i];
      r.prefix.push_back(last[i]);
      step_sources.push_back(r.source);
      const auto lp = log_probs(sources_[r.source], r.prefix);
      out.insert(out.end(), lp.begin(), lp.end());
    }
    trace.push_back(step_sources);
    if (bad_shape) return Tensor::zeros({n, v_ + 1}, dtype_);
    if (nan_output && !out.empty()) out[0] = NAN;
    Tensor t = Tensor::from_vector<double>(out, {n, v_});  // [N, V]
    return dtype_ == DType::F64 ? t : t.to(dtype_);
  }

  void reorder(const std::vector<int64_t>& rows) override {
    std::vector<Row> next;
    for (int64_t r : rows) {
      if (r < 0 || r >= static_cast<int64_t>(rows_.size())) fail("MockDecoder", "reorder row ", r, " out of range");
      next.push_back(rows_[r]);
    }
    rows_ = std::move(next);
    ++reorders;
  }

  int64_t vocab_size() const override { return v_; }

  // Rows fed at each step, as the source index of each row.
  std::vector<std::vector<int64_t>> trace;
  int starts = 0;
  int reorders = 0;
  bool bad_shape = false;   // step returns [N, V + 1]
  bool nan_output = false;  // step returns a NaN

  // Rows of source s at each step of the trace.
  std::vector<int64_t> rows_of(int64_t s) const {
    std::vector<int64_t> counts;
    for (const auto& st : trace) {
      int64_t c = 0;
      for (int64_t x : st) c += x == s;
      counts.push_back(c);
    }
    return counts;
  }

 private:
  struct Row {
    int64_t source;
    std::vector<int64_t> prefix;  // BOS first
  };
  int64_t v_;
  LogitsFn logits_;
  int64_t pad_;
  DType dtype_;
  std::vector<std::vector<int64_t>> sources_;
  std::vector<Row> rows_;
};

// Sources of different lengths, right-padded with `pad` into one I64 [B, S] tensor.
inline Tensor padded_batch(const std::vector<std::vector<int64_t>>& sources, int64_t pad) {
  size_t s = 0;
  for (const auto& x : sources) s = std::max(s, x.size());
  std::vector<int64_t> ids;
  for (const auto& x : sources) {
    ids.insert(ids.end(), x.begin(), x.end());
    ids.insert(ids.end(), s - x.size(), pad);
  }
  return Tensor::from_vector<int64_t>(ids, {static_cast<int64_t>(sources.size()), static_cast<int64_t>(s)});
}

}  // namespace attn::test
