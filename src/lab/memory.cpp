// `attn lab memory`: the cost of attention in closed form. Per layer and sequence of T tokens,
// with D = H * Dh and F the FFN width (2 FLOPs per multiply-add):
//   projections Q, K, V, O   4 * 2 T D^2 = 8 T D^2
//   Q K^T and weights x V    2 * 2 T^2 D = 4 T^2 D    (H heads of T x T x Dh each)
//   FFN W_1, W_2             2 * 2 T D F = 4 T D F
// Decoding T tokens: with a KV cache step t (t tokens in context) costs 8 D^2 + 4 t D + 4 D F;
// recomputing the prefix costs the full forward of t tokens, 8 t D^2 + 4 t^2 D + 4 t D F.
#include "attn/lab/memory.h"

#include <cstdio>

#include "attn/core/error.h"

namespace attn::lab {

namespace {

constexpr const char* kOp = "lab memory";

// sum_{t=1..T} t and sum_{t=1..T} t^2, in double (T up to millions).
double sum_t(double T) { return T * (T + 1) / 2; }
double sum_t2(double T) { return T * (T + 1) * (2 * T + 1) / 6; }

}  // namespace

MemoryReport memory_report(const MemoryOptions& in) {
  MemoryOptions o = in;
  ATTN_CHECK(o.seq > 0 && o.heads > 0 && o.layers > 0 && o.batch > 0, kOp,
             "--seq, --heads, --layers and --batch must be positive, got ", o.seq, ", ", o.heads, ", ", o.layers,
             ", ", o.batch);
  ATTN_CHECK(is_floating(o.dtype), kOp, "dtype must be f32 or f64, got ", dtype_name(o.dtype));
  ATTN_CHECK(o.d_model >= 0 && o.d_ff >= 0, kOp, "--d-model and --d-ff must be positive, got ", o.d_model, " and ",
             o.d_ff);
  if (o.d_model == 0) o.d_model = 64 * o.heads;
  if (o.d_ff == 0) o.d_ff = 4 * o.d_model;
  ATTN_CHECK(o.d_model % o.heads == 0, kOp, "--d-model ", o.d_model, " is not divisible by --heads ", o.heads);
  if (o.lengths.empty()) {
    if (o.seq / 8 > 0) o.lengths.push_back(o.seq / 8);
    o.lengths.push_back(o.seq);
    o.lengths.push_back(8 * o.seq);
  }
  for (int64_t T : o.lengths) ATTN_CHECK(T > 0, kOp, "sequence lengths must be positive, got ", T);

  const double H = static_cast<double>(o.heads), D = static_cast<double>(o.d_model), F = static_cast<double>(o.d_ff);
  const double bytes = static_cast<double>(dtype_size(o.dtype));
  const double copies = static_cast<double>(o.layers) * static_cast<double>(o.batch);
  MemoryReport report;
  for (int64_t length : o.lengths) {
    const double T = static_cast<double>(length);
    MemoryRow r;
    r.length = length;
    r.score_bytes = H * T * T * bytes;
    r.stored_score_bytes = copies * r.score_bytes;
    r.fused_bytes = copies * H * T * bytes;
    r.score_flops = 4 * T * T * D;
    r.attention_flops = 8 * T * D * D + r.score_flops;
    r.ffn_flops = 4 * T * D * F;
    r.model_flops = copies * (r.attention_flops + r.ffn_flops);
    r.kv_cache_bytes = copies * 2 * T * D * bytes;
    r.decode_flops_cached = copies * (T * (8 * D * D + 4 * D * F) + 4 * D * sum_t(T));
    r.decode_flops_recompute = copies * ((8 * D * D + 4 * D * F) * sum_t(T) + 4 * D * sum_t2(T));
    report.rows.push_back(r);
  }
  report.options = o;
  return report;
}

std::string format_gb(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / 1e9);
  return buf;
}

std::string format_si(double value) {
  static const char* const kPrefix[] = {"", "k", "M", "G", "T", "P", "E", "Z", "Y"};
  int i = 0;
  while (value >= 999.5 && i < 8) {
    value /= 1000;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, value >= 99.95 ? "%.0f %s" : value >= 9.995 ? "%.1f %s" : "%.2f %s", value,
                kPrefix[i]);
  return buf;
}

std::string format_memory_report(const MemoryReport& report) {
  const MemoryOptions& o = report.options;
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line,
                "attention cost: %lld heads, d_model %lld (Dh %lld), d_ff %lld, %s (%zu bytes), %lld layer%s, batch %lld\n\n",
                static_cast<long long>(o.heads), static_cast<long long>(o.d_model),
                static_cast<long long>(o.d_model / o.heads), static_cast<long long>(o.d_ff), dtype_name(o.dtype),
                dtype_size(o.dtype), static_cast<long long>(o.layers), o.layers == 1 ? "" : "s",
                static_cast<long long>(o.batch));
  s += line;
  s += "score matrix softmax(Q K^T / sqrt(Dh)), [H, T, T] per layer and sequence:\n";
  s += "         T   one layer (GB)   kept for backward, all layers x batch (GB)   fused attention keeps instead\n";
  for (const MemoryRow& r : report.rows) {
    std::snprintf(line, sizeof line, "%10lld   %14s   %42s   %29s\n", static_cast<long long>(r.length),
                  format_gb(r.score_bytes).c_str(), format_gb(r.stored_score_bytes).c_str(),
                  (format_si(r.fused_bytes) + "B").c_str());
    s += line;
  }
  s += "\nforward FLOPs (2 per multiply-add), per layer and sequence; model = layers x batch:\n";
  s += "         T    attention   of which QK^T, PV          FFN        model\n";
  for (const MemoryRow& r : report.rows) {
    std::snprintf(line, sizeof line, "%10lld   %10s   %17s   %10s   %10s\n", static_cast<long long>(r.length),
                  format_si(r.attention_flops).c_str(), format_si(r.score_flops).c_str(),
                  format_si(r.ffn_flops).c_str(), format_si(r.model_flops).c_str());
    s += line;
  }
  s += "\ngenerating T tokens one at a time (self-attention + FFN layers, all layers x batch):\n";
  s += "         T        KV cache   FLOPs with KV cache   FLOPs recomputing the prefix   saved\n";
  for (const MemoryRow& r : report.rows) {
    std::snprintf(line, sizeof line, "%10lld   %13s   %19s   %28s   %4.0fx\n", static_cast<long long>(r.length),
                  (format_si(r.kv_cache_bytes) + "B").c_str(), format_si(r.decode_flops_cached).c_str(),
                  format_si(r.decode_flops_recompute).c_str(), r.decode_flops_recompute / r.decode_flops_cached);
    s += line;
  }
  s += "\nfused attention (tiled online softmax; ops/attention.h runs it when no weights are requested):\n"
       "  the same result and the same forward FLOPs, but the T x T scores are never stored: memory\n"
       "  O(H*T) per layer instead of O(H*T^2); the backward recomputes Q K^T (+2 T^2 D FLOPs per layer).\n"
       "KV cache: each decoding step projects only the new token and attends over the cached keys and\n"
       "  values: O(t*D + D^2 + D*F) per step instead of a forward over the whole prefix, paid for with\n"
       "  the cache memory above, which grows linearly with T.\n";
  return s;
}

}  // namespace attn::lab
