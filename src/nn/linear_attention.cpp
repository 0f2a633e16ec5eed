// Linear attention (Katharopoulos et al. 2020) as one fused op with a hand-written backward, and
// the multi-head layer around it. Per (batch, head) slice the kernel keeps only the sums
// KV = sum_j phi(k_j) v_j^T [Dk, Dv] and z = sum_j phi(k_j) [Dk]: all keys at once without a
// causal mask, a running prefix with one. Nothing of size [Tq, Tk] is ever formed, forward or
// backward, so memory stays O(T). The kernel pair lives here rather than in src/kernels/ because
// the op is not (yet) part of ops.h; it follows the kernels' conventions all the same.
#include "attn/nn/linear_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attn/nn/init.h"
#include "attn/ops/ops.h"

namespace attn::kernels {
namespace {

// phi(x) = elu(x) + 1 and its derivative phi'(x) = 1 for x > 0, exp(x) otherwise.
template <class T>
inline T elu_plus_one(T x) {
  return x > T(0) ? x + T(1) : std::exp(x);
}
template <class T>
inline T elu_plus_one_grad(T x) {
  return x > T(0) ? T(1) : std::exp(x);
}

// out [B, H, Tq, Dv] and den [B, H, Tq] from q [B, H, Tq, Dk], k [B, H, Tk, Dk], v [B, H, Tk, Dv]:
//   den_i = phi(q_i) . z_i,  out_i = phi(q_i)^T KV_i / den_i   (0 when den_i == 0: no key seen)
// with KV_i = sum_{j seen by i} phi(k_j) v_j^T and z_i = sum_{j seen by i} phi(k_j). Query i sees
// every key, or with `causal` the keys j <= i + (Tk - Tq); keys with key_padding[b, j] != 0 never.
template <class T>
void linear_attention_forward(T* out, T* den, const T* q, const T* k, const T* v, const uint8_t* key_padding,
                              bool causal, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t Dk,
                              int64_t Dv) {
  const int64_t BH = B * H, shift = Tk - Tq;
#pragma omp parallel for schedule(static) if (BH > 1 && BH * (Tq + Tk) * Dk * Dv >= 32768)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const T* qs = q + bh * Tq * Dk;  // [Tq, Dk]
    const T* ks = k + bh * Tk * Dk;  // [Tk, Dk]
    const T* vs = v + bh * Tk * Dv;  // [Tk, Dv]
    T* os = out + bh * Tq * Dv;      // [Tq, Dv]
    T* ds = den + bh * Tq;           // [Tq]
    const uint8_t* pad = key_padding ? key_padding + (bh / H) * Tk : nullptr;
    std::vector<T> kv(static_cast<size_t>(Dk * Dv), T(0)), z(static_cast<size_t>(Dk), T(0));
    std::vector<T> phi(static_cast<size_t>(Dk));
    int64_t added = 0;  // keys [0, added) are in kv and z
    auto add_keys_through = [&](int64_t last) {
      for (; added <= last && added < Tk; ++added) {
        if (pad && pad[added]) continue;
        const T* kj = ks + added * Dk;
        const T* vj = vs + added * Dv;
        for (int64_t a = 0; a < Dk; ++a) {
          const T f = elu_plus_one(kj[a]);
          z[static_cast<size_t>(a)] += f;
          T* row = kv.data() + a * Dv;
          for (int64_t c = 0; c < Dv; ++c) row[c] += f * vj[c];
        }
      }
    };
    if (!causal) add_keys_through(Tk - 1);
    for (int64_t i = 0; i < Tq; ++i) {
      if (causal) add_keys_through(i + shift);
      const T* qi = qs + i * Dk;
      T d = 0;
      for (int64_t a = 0; a < Dk; ++a) {
        phi[static_cast<size_t>(a)] = elu_plus_one(qi[a]);
        d += phi[static_cast<size_t>(a)] * z[static_cast<size_t>(a)];
      }
      ds[i] = d;
      T* oi = os + i * Dv;
      for (int64_t c = 0; c < Dv; ++c) oi[c] = T(0);
      if (!(d > T(0))) continue;  // no key seen (or every phi(k) underflowed): zeros
      for (int64_t a = 0; a < Dk; ++a) {
        const T f = phi[static_cast<size_t>(a)];
        const T* row = kv.data() + a * Dv;
        for (int64_t c = 0; c < Dv; ++c) oi[c] += f * row[c];
      }
      const T inv = T(1) / d;
      for (int64_t c = 0; c < Dv; ++c) oi[c] *= inv;
    }
  }
}

// Backward of linear_attention_forward; accumulates (+=) into dq, dk, dv, which the caller zeroed.
// Forward: out_i = num_i / den_i, num_i = KV_i^T phi(q_i), den_i = phi(q_i) . z_i. With g_i = dL/dout_i:
//   dnum_i = g_i / den_i,   dden_i = -(g_i . out_i) / den_i          (d(n/d)/dd = -n/d^2 = -out/d)
//   dphi(q_i) = KV_i dnum_i + z_i dden_i                             (the prefix state of query i)
//   dphi(k_j) = R_j v_j + r_j,  dv_j = R_j^T phi(k_j),  with R_j = sum_{i sees j} phi(q_i) dnum_i^T
//                                                        and r_j = sum_{i sees j} phi(q_i) dden_i
//   dq = dphi(q) * phi'(q),  dk = dphi(k) * phi'(k)   (phi' = 1 for x > 0, exp(x) otherwise).
// Causal: KV_i, z_i are rebuilt by a forward sweep over the queries, R_j, r_j by a backward sweep
// over the keys (suffix sums), so the backward also needs only O(Dk * Dv) scratch per slice.
template <class T>
void linear_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* den, const T* q,
                               const T* k, const T* v, const uint8_t* key_padding, bool causal, int64_t B,
                               int64_t H, int64_t Tq, int64_t Tk, int64_t Dk, int64_t Dv) {
  const int64_t BH = B * H, shift = Tk - Tq;
#pragma omp parallel for schedule(static) if (BH > 1 && BH * (Tq + Tk) * Dk * Dv >= 32768)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const T* qs = q + bh * Tq * Dk;     // [Tq, Dk]
    const T* ks = k + bh * Tk * Dk;     // [Tk, Dk]
    const T* vs = v + bh * Tk * Dv;     // [Tk, Dv]
    const T* gs = dout + bh * Tq * Dv;  // [Tq, Dv]
    const T* os = out + bh * Tq * Dv;   // [Tq, Dv]
    const T* ds = den + bh * Tq;        // [Tq]
    T* dqs = dq + bh * Tq * Dk;
    T* dks = dk + bh * Tk * Dk;
    T* dvs = dv + bh * Tk * Dv;
    const uint8_t* pad = key_padding ? key_padding + (bh / H) * Tk : nullptr;
    std::vector<T> acc(static_cast<size_t>(Dk * Dv), T(0)), vec(static_cast<size_t>(Dk), T(0));
    std::vector<T> phi(static_cast<size_t>(Dk)), dnum(static_cast<size_t>(Dv));

    // dnum_i into `dnum`; returns dden_i (both zero for a query that saw no key).
    auto query_grads = [&](int64_t i) -> T {
      const T d = ds[i];
      if (!(d > T(0))) {
        for (int64_t c = 0; c < Dv; ++c) dnum[static_cast<size_t>(c)] = T(0);
        return T(0);
      }
      const T inv = T(1) / d;
      T dot = 0;
      for (int64_t c = 0; c < Dv; ++c) {
        dnum[static_cast<size_t>(c)] = gs[i * Dv + c] * inv;
        dot += gs[i * Dv + c] * os[i * Dv + c];
      }
      return -dot * inv;
    };

    // Sweep 1, over queries: acc = KV_i, vec = z_i (prefix sums when causal).
    int64_t added = 0;
    auto add_keys_through = [&](int64_t last) {
      for (; added <= last && added < Tk; ++added) {
        if (pad && pad[added]) continue;
        for (int64_t a = 0; a < Dk; ++a) {
          const T f = elu_plus_one(ks[added * Dk + a]);
          vec[static_cast<size_t>(a)] += f;
          for (int64_t c = 0; c < Dv; ++c) acc[static_cast<size_t>(a * Dv + c)] += f * vs[added * Dv + c];
        }
      }
    };
    if (!causal) add_keys_through(Tk - 1);
    for (int64_t i = 0; i < Tq; ++i) {
      if (causal) add_keys_through(i + shift);
      const T dden = query_grads(i);
      for (int64_t a = 0; a < Dk; ++a) {
        T g = vec[static_cast<size_t>(a)] * dden;
        const T* row = acc.data() + a * Dv;
        for (int64_t c = 0; c < Dv; ++c) g += row[c] * dnum[static_cast<size_t>(c)];
        dqs[i * Dk + a] += g * elu_plus_one_grad(qs[i * Dk + a]);
      }
    }

    // Sweep 2, over keys from the last: acc = R_j, vec = r_j (suffix sums when causal).
    std::fill(acc.begin(), acc.end(), T(0));
    std::fill(vec.begin(), vec.end(), T(0));
    int64_t next_query = Tq - 1;  // queries (next_query, Tq) are in acc and vec
    auto add_queries_seeing = [&](int64_t j) {
      for (; next_query >= 0 && (!causal || next_query + shift >= j); --next_query) {
        const T dden = query_grads(next_query);
        for (int64_t a = 0; a < Dk; ++a) {
          const T f = elu_plus_one(qs[next_query * Dk + a]);
          vec[static_cast<size_t>(a)] += f * dden;
          for (int64_t c = 0; c < Dv; ++c) acc[static_cast<size_t>(a * Dv + c)] += f * dnum[static_cast<size_t>(c)];
        }
      }
    };
    for (int64_t j = Tk - 1; j >= 0; --j) {
      add_queries_seeing(j);
      if (pad && pad[j]) continue;  // phi(k_j) was replaced by 0: no gradient reaches k_j or v_j
      const T* kj = ks + j * Dk;
      const T* vj = vs + j * Dv;
      for (int64_t a = 0; a < Dk; ++a) phi[static_cast<size_t>(a)] = elu_plus_one(kj[a]);
      for (int64_t a = 0; a < Dk; ++a) {
        const T* row = acc.data() + a * Dv;
        T g = vec[static_cast<size_t>(a)];
        for (int64_t c = 0; c < Dv; ++c) g += row[c] * vj[c];
        dks[j * Dk + a] += g * elu_plus_one_grad(kj[a]);
        const T f = phi[static_cast<size_t>(a)];
        for (int64_t c = 0; c < Dv; ++c) dvs[j * Dv + c] += f * row[c];
      }
    }
  }
}

}  // namespace
}  // namespace attn::kernels

namespace attn::nn {

namespace {

constexpr const char* kOp = "linear_attention";
constexpr const char* kLayer = "LinearAttention";

struct Sizes {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0, Dk = 0, Dv = 0;
};

struct LinearAttentionBackward : Node {
  Tensor q, k, v, out, den, padding;  // contiguous, detached; padding Bool [B, Tk] or undefined
  bool causal = false;
  Sizes s;
  const char* name() const override { return "LinearAttentionBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor g = g_in.dtype() == q.dtype() ? g_in.contiguous() : g_in.to(q.dtype());
    Tensor dq = Tensor::zeros(q.shape(), q.dtype());  // [B, H, Tq, Dk]
    Tensor dk = Tensor::zeros(k.shape(), k.dtype());  // [B, H, Tk, Dk]
    Tensor dv = Tensor::zeros(v.shape(), v.dtype());  // [B, H, Tk, Dv]
    const uint8_t* pad = padding.defined() ? static_cast<const uint8_t*>(padding.raw_data()) : nullptr;
    if (q.dtype() == DType::F32)
      kernels::linear_attention_backward<float>(dq.data<float>(), dk.data<float>(), dv.data<float>(),
                                                g.data<float>(), out.data<float>(), den.data<float>(),
                                                q.data<float>(), k.data<float>(), v.data<float>(), pad, causal,
                                                s.B, s.H, s.Tq, s.Tk, s.Dk, s.Dv);
    else
      kernels::linear_attention_backward<double>(dq.data<double>(), dk.data<double>(), dv.data<double>(),
                                                 g.data<double>(), out.data<double>(), den.data<double>(),
                                                 q.data<double>(), k.data<double>(), v.data<double>(), pad,
                                                 causal, s.B, s.H, s.Tq, s.Tk, s.Dk, s.Dv);
    return {dq, dk, dv};
  }
  void release() override { q = k = v = out = den = padding = Tensor(); }
};

}  // namespace

double linear_attention_feature(double x) { return kernels::elu_plus_one(x); }

Tensor linear_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const LinearAttentionOptions& options) {
  ATTN_CHECK(q_in.defined() && k_in.defined() && v_in.defined(), kOp, "q, k and v must be defined");
  ATTN_CHECK(is_floating(q_in.dtype()), kOp, "q must be f32 or f64, got ", q_in.str());
  ATTN_CHECK(k_in.dtype() == q_in.dtype() && v_in.dtype() == q_in.dtype(), kOp,
             "q, k and v must share one dtype, got ", q_in.str(), ", ", k_in.str(), ", ", v_in.str());
  ATTN_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, kOp,
             "q, k, v must be [B, H, T, D], got ", q_in.str(), ", ", k_in.str(), ", ", v_in.str());
  Sizes s;
  s.B = q_in.size(0), s.H = q_in.size(1), s.Tq = q_in.size(2), s.Dk = q_in.size(3);
  s.Tk = k_in.size(2), s.Dv = v_in.size(3);
  ATTN_CHECK(k_in.size(0) == s.B && k_in.size(1) == s.H && k_in.size(3) == s.Dk, kOp, "k must be [", s.B, ", ",
             s.H, ", Tk, ", s.Dk, "] to match q ", q_in.str(), ", got ", k_in.str());
  ATTN_CHECK(v_in.size(0) == s.B && v_in.size(1) == s.H && v_in.size(2) == s.Tk, kOp, "v must be [", s.B, ", ",
             s.H, ", ", s.Tk, ", Dv] to match k ", k_in.str(), ", got ", v_in.str());
  Tensor padding;
  if (options.key_padding_mask.defined()) {
    const Tensor& m = options.key_padding_mask;
    ATTN_CHECK(m.dtype() == DType::Bool, kOp, "key_padding_mask must be bool, got ", m.str());
    ATTN_CHECK(m.shape() == (Shape{s.B, s.Tk}), kOp, "key_padding_mask must be [B, Tk] = ",
               shape_str({s.B, s.Tk}), ", got ", m.str());
    padding = m.contiguous().detach();
  }
  const Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  Tensor out = Tensor::empty({s.B, s.H, s.Tq, s.Dv}, q.dtype());  // [B, H, Tq, Dv]
  Tensor den = Tensor::empty({s.B, s.H, s.Tq}, q.dtype());         // [B, H, Tq]
  const uint8_t* pad = padding.defined() ? static_cast<const uint8_t*>(padding.raw_data()) : nullptr;
  if (q.dtype() == DType::F32)
    kernels::linear_attention_forward<float>(out.data<float>(), den.data<float>(), q.data<float>(),
                                             k.data<float>(), v.data<float>(), pad, options.causal, s.B, s.H,
                                             s.Tq, s.Tk, s.Dk, s.Dv);
  else
    kernels::linear_attention_forward<double>(out.data<double>(), den.data<double>(), q.data<double>(),
                                              k.data<double>(), v.data<double>(), pad, options.causal, s.B,
                                              s.H, s.Tq, s.Tk, s.Dk, s.Dv);
  if (needs_grad({&q_in, &k_in, &v_in})) {
    auto node = std::make_shared<LinearAttentionBackward>();
    node->q = q.detach();
    node->k = k.detach();
    node->v = v.detach();
    node->out = out.detach();
    node->den = den;
    node->padding = padding;
    node->causal = options.causal;
    node->s = s;
    attach_node(out, node, {q_in, k_in, v_in});
  }
  return out;
}

// ---- the multi-head layer ---------------------------------------------------------------

LinearAttention::LinearAttention(int64_t d_model, int64_t n_heads, DType dtype, Rng& rng)
    : d_model_(d_model), n_heads_(n_heads), head_dim_(n_heads > 0 ? d_model / n_heads : 0) {
  ATTN_CHECK(d_model > 0 && n_heads > 0, kLayer, "d_model and n_heads must be positive, got ", d_model, " and ",
             n_heads);
  ATTN_CHECK(d_model % n_heads == 0, kLayer, "d_model ", d_model, " is not divisible by n_heads ", n_heads);
  ATTN_CHECK(is_floating(dtype), kLayer, "dtype must be f32 or f64, got ", dtype_name(dtype));
  const int64_t D = d_model_;
  in_proj_weight_ = register_parameter("in_proj_weight", Tensor::zeros({3 * D, D}, dtype));  // [3D, D]
  in_proj_bias_ = register_parameter("in_proj_bias", Tensor::zeros({3 * D}, dtype));        // [3D]
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(D, D, true, dtype, rng));
  // As nn.MultiheadAttention: xavier on the packed matrix, zero biases.
  xavier_uniform_(in_proj_weight_, rng);
  constant_(out_proj_->bias(), 0.0);
}

Tensor LinearAttention::project(const Tensor& x, int64_t i) const {
  const int64_t D = d_model_;
  Tensor w = slice(in_proj_weight_, 0, i * D, (i + 1) * D);  // [D, D]
  Tensor b = slice(in_proj_bias_, 0, i * D, (i + 1) * D);    // [D]
  return linear(x, w, b);                                    // [B, T, D]
}

Tensor LinearAttention::split_heads(const Tensor& x) const {
  const int64_t B = x.size(0), T = x.size(1);
  Tensor heads = reshape(x, {B, T, n_heads_, head_dim_});  // [B, T, H, Dh]
  return transpose(heads, 1, 2);                            // [B, H, T, Dh]
}

Tensor LinearAttention::join_heads(const Tensor& x) const {
  const int64_t B = x.size(0), T = x.size(2);
  Tensor swapped = transpose(x, 1, 2);        // [B, T, H, Dh]
  return reshape(swapped, {B, T, d_model_});  // [B, T, D]
}

void LinearAttention::check_input(const Tensor& x, const char* what) const {
  ATTN_CHECK(x.defined() && x.dim() == 3 && x.size(2) == d_model_, kLayer, what, " must be [B, T, ", d_model_,
             "], got ", x.defined() ? x.str() : "undefined");
  ATTN_CHECK(x.dtype() == in_proj_weight_.dtype(), kLayer, what, " must be ", dtype_name(in_proj_weight_.dtype()),
             " like the parameters, got ", x.str());
}

Tensor LinearAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                const AttentionMasks& masks) {
  check_input(query, "query");
  check_input(key, "key");
  check_input(value, "value");
  ATTN_CHECK(key.size(0) == query.size(0) && value.shape() == key.shape(), kLayer,
             "key and value must be [", query.size(0), ", Tk, ", d_model_, "] alike, got ", key.str(), " and ",
             value.str(), " with query ", query.str());
  ATTN_CHECK(!masks.attn_mask.defined(), kLayer,
             "linear attention takes only causal and key padding masks; an attn_mask ", masks.attn_mask.str(),
             " needs the score matrix it avoids");
  LinearAttentionOptions options;
  options.causal = masks.causal;
  if (masks.key_padding_mask.defined()) {
    ATTN_CHECK(masks.key_padding_mask.dtype() == DType::Bool, kLayer,
               "key_padding_mask must be bool (true = padding), got ", masks.key_padding_mask.str());
    options.key_padding_mask = masks.key_padding_mask;
  }
  Tensor q = split_heads(project(query, 0));                 // [B, H, Tq, Dh]
  Tensor k = split_heads(project(key, 1));                   // [B, H, Tk, Dh]
  Tensor v = split_heads(project(value, 2));                 // [B, H, Tk, Dh]
  Tensor attended = linear_attention(q, k, v, options);      // [B, H, Tq, Dh]
  return out_proj_->forward(join_heads(attended));           // [B, Tq, D]
}

CrossKV LinearAttention::project_memory_kv(const Tensor& memory) const {
  check_input(memory, "memory");
  CrossKV kv;
  kv.k = split_heads(project(memory, 1)).contiguous();  // [B, H, S, Dh]
  kv.v = split_heads(project(memory, 2)).contiguous();  // [B, H, S, Dh]
  return kv;
}

Tensor LinearAttention::forward_cached(const Tensor& x, SelfKV& kv, const AttentionMasks& masks) {
  Tensor& k_cache = kv.k;
  Tensor& v_cache = kv.v;
  ATTN_CHECK(kv.paged == nullptr, "LinearAttention",
             "linear attention keeps its keys and values contiguous; it has no paged KV cache");
  check_input(x, "the new positions x");
  Tensor k_new = split_heads(project(x, 1));  // [N, H, T, Dh]
  Tensor v_new = split_heads(project(x, 2));  // [N, H, T, Dh]
  if (k_cache.defined()) {
    ATTN_CHECK(k_cache.dim() == 4 && k_cache.size(0) == x.size(0) && k_cache.size(1) == n_heads_ &&
                   k_cache.size(3) == head_dim_ && v_cache.defined() && v_cache.shape() == k_cache.shape(),
               kLayer, "cached keys must be [", x.size(0), ", ", n_heads_, ", T, ", head_dim_,
               "] like the values, got ", k_cache.str(), " and ", v_cache.defined() ? v_cache.str() : "undefined");
    k_cache = concat({k_cache, k_new}, 2);  // [N, H, T' + T, Dh]
    v_cache = concat({v_cache, v_new}, 2);  // [N, H, T' + T, Dh]
  } else {
    k_cache = k_new.contiguous();  // [N, H, T, Dh]
    v_cache = v_new.contiguous();  // [N, H, T, Dh]
  }
  LinearAttentionOptions options;
  options.causal = true;  // bottom-right: new query i sees keys j <= T' + i
  if (masks.key_padding_mask.defined()) {
    ATTN_CHECK(masks.key_padding_mask.dtype() == DType::Bool, kLayer,
               "key_padding_mask must be bool (true = padding), got ", masks.key_padding_mask.str());
    options.key_padding_mask = masks.key_padding_mask;
  }
  Tensor q = split_heads(project(x, 0));                           // [N, H, T, Dh]
  Tensor attended = linear_attention(q, k_cache, v_cache, options);  // [N, H, T, Dh]
  return out_proj_->forward(join_heads(attended));                 // [N, T, D]
}

Tensor LinearAttention::forward_cached(const Tensor& query, const CrossKV& kv, const Tensor& key_padding_mask) {
  const Tensor& k = kv.k;
  const Tensor& v = kv.v;
  check_input(query, "a step's query");
  const int64_t N = query.size(0);
  ATTN_CHECK(query.size(1) == 1, kLayer, "a step's query must be [N, 1, ", d_model_, "], got ", query.str());
  ATTN_CHECK(k.defined() && v.defined() && k.dim() == 4 && k.size(0) == N && k.size(1) == n_heads_ &&
                 k.size(3) == head_dim_ && v.shape() == k.shape(),
             kLayer, "cached k and v must be [", N, ", ", n_heads_, ", Tk, ", head_dim_, "], got ",
             k.defined() ? k.str() : "undefined", " and ", v.defined() ? v.str() : "undefined");
  LinearAttentionOptions options;  // every cached key is in the past: no causal mask needed
  options.key_padding_mask = key_padding_mask;
  Tensor q = split_heads(project(query, 0));                // [N, H, 1, Dh]
  Tensor attended = linear_attention(q, k, v, options);     // [N, H, 1, Dh]
  return out_proj_->forward(join_heads(attended));          // [N, 1, D]
}

namespace {

// One recurrent step for every (n, h): z += phi(k), kv += phi(k) v^T, out = phi(q)^T kv / phi(q).z.
// q, k, v, out [N*H, Dh]; kv [N*H, Dh, Dh]; z [N*H, Dh].
template <class T>
void recurrent_step(T* out, T* kv, T* z, const T* q, const T* k, const T* v, int64_t rows, int64_t Dh) {
  for (int64_t r = 0; r < rows; ++r) {
    T* kvr = kv + r * Dh * Dh;
    T* zr = z + r * Dh;
    const T* qr = q + r * Dh;
    const T* kr = k + r * Dh;
    const T* vr = v + r * Dh;
    T* o = out + r * Dh;
    for (int64_t a = 0; a < Dh; ++a) {
      const T f = kernels::elu_plus_one(kr[a]);
      zr[a] += f;
      for (int64_t c = 0; c < Dh; ++c) kvr[a * Dh + c] += f * vr[c];
    }
    T d = 0;
    for (int64_t c = 0; c < Dh; ++c) o[c] = T(0);
    for (int64_t a = 0; a < Dh; ++a) {
      const T f = kernels::elu_plus_one(qr[a]);
      d += f * zr[a];
      for (int64_t c = 0; c < Dh; ++c) o[c] += f * kvr[a * Dh + c];
    }
    const T inv = d > T(0) ? T(1) / d : T(0);
    for (int64_t c = 0; c < Dh; ++c) o[c] *= inv;
  }
}

}  // namespace

Tensor LinearAttention::forward_cached(const Tensor& x, LinearAttentionState& state) {
  ATTN_CHECK(!grad_mode_enabled(), kLayer, "the recurrent form is for inference: call it under NoGradGuard");
  check_input(x, "a step's x");
  const int64_t N = x.size(0), H = n_heads_, Dh = head_dim_;
  ATTN_CHECK(x.size(1) == 1, kLayer, "a step's x must be [N, 1, ", d_model_, "], got ", x.str());
  const DType dtype = x.dtype();
  if (!state.kv.defined()) {
    state.kv = Tensor::zeros({N, H, Dh, Dh}, dtype);  // [N, H, Dh, Dh]
    state.z = Tensor::zeros({N, H, Dh}, dtype);       // [N, H, Dh]
    state.steps = 0;
  }
  ATTN_CHECK(state.kv.shape() == (Shape{N, H, Dh, Dh}) && state.z.defined() &&
                 state.z.shape() == (Shape{N, H, Dh}) && state.kv.dtype() == dtype && state.z.dtype() == dtype,
             kLayer, "the recurrent state must be kv [", N, ", ", H, ", ", Dh, ", ", Dh, "] and z [", N, ", ", H,
             ", ", Dh, "] of ", dtype_name(dtype), ", got ", state.kv.str(), " and ",
             state.z.defined() ? state.z.str() : "undefined");
  Tensor q = split_heads(project(x, 0)).contiguous();  // [N, H, 1, Dh]
  Tensor k = split_heads(project(x, 1)).contiguous();  // [N, H, 1, Dh]
  Tensor v = split_heads(project(x, 2)).contiguous();  // [N, H, 1, Dh]
  Tensor out = Tensor::empty({N, H, 1, Dh}, dtype);    // [N, H, 1, Dh]
  if (dtype == DType::F32)
    recurrent_step<float>(out.data<float>(), state.kv.data<float>(), state.z.data<float>(), q.data<float>(),
                          k.data<float>(), v.data<float>(), N * H, Dh);
  else
    recurrent_step<double>(out.data<double>(), state.kv.data<double>(), state.z.data<double>(), q.data<double>(),
                           k.data<double>(), v.data<double>(), N * H, Dh);
  ++state.steps;
  return out_proj_->forward(join_heads(out));  // [N, 1, D]
}

}  // namespace attn::nn
