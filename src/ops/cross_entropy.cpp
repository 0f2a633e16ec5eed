// ops/cross_entropy.cpp — the training loss: softmax cross-entropy with ignore_index and
// label smoothing, as torch.nn.CrossEntropyLoss(reduction='mean') (§5, §5.4). Validates the
// targets, runs the fused kernel, averages over the rows that are not ignored (0 when all are)
// and records CrossEntropyBackward. Not done here: class weights, 'sum'/'none' reductions,
// soft (probability) targets, logits of rank other than 2 (callers flatten [B, T, V]).
#include "attn/ops/ops.h"
#include "kernels/cross_entropy.h"

namespace attn {

namespace {

struct CrossEntropyBackward : Node {
  Tensor logits;   // [N, V] contiguous
  Tensor targets;  // [N] contiguous
  Tensor lse;      // [N] log-sum-exp of each valid row
  int64_t ignore_index = -100;
  double label_smoothing = 0;
  int64_t n_valid = 0;
  const char* name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dlogits = Tensor::zeros(logits.shape(), logits.dtype());  // [N, V]
    if (n_valid == 0) return {dlogits, Tensor()};
    const double scale = g.item() / static_cast<double>(n_valid);
    const int64_t N = logits.size(0), V = logits.size(1);
    if (logits.dtype() == DType::F32)
      kernels::cross_entropy_backward<float>(dlogits.data<float>(), lse.data<float>(),
                                             logits.data<float>(), targets.data<int64_t>(), N, V,
                                             ignore_index, label_smoothing,
                                             static_cast<float>(scale));
    else
      kernels::cross_entropy_backward<double>(dlogits.data<double>(), lse.data<double>(),
                                              logits.data<double>(), targets.data<int64_t>(), N,
                                              V, ignore_index, label_smoothing, scale);
    return {dlogits, Tensor()};
  }
  void release() override { logits = targets = lse = Tensor(); }
};

template <class T>
double forward_run(Tensor& lse, const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                   double label_smoothing) {
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor losses = Tensor::empty({N}, logits.dtype());  // [N] per-row losses, 0 when ignored
  kernels::cross_entropy_forward<T>(losses.data<T>(), lse.data<T>(), logits.data<T>(),
                                    targets.data<int64_t>(), N, V, ignore_index, label_smoothing);
  // Summed in double: N can be large (B * T tokens).
  const T* l = losses.data<T>();
  double total = 0;
  for (int64_t n = 0; n < N; ++n) total += static_cast<double>(l[n]);
  return total;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     double label_smoothing) {
  const char* op = "cross_entropy";
  ATTN_CHECK(logits.defined() && targets.defined(), op, "logits and targets must be defined");
  ATTN_CHECK(is_floating(logits.dtype()), op, "logits must be f32 or f64, got ", logits.str());
  ATTN_CHECK(targets.dtype() == DType::I64, op, "targets must be i64, got ", targets.str());
  ATTN_CHECK(logits.dim() == 2, op, "logits must be [N, V], got ", logits.str());
  ATTN_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), op, "targets must be [",
             logits.size(0), "] for logits ", logits.str(), ", got ", targets.str());
  ATTN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op,
             "label_smoothing must be in [0, 1], got ", label_smoothing);
  const int64_t N = logits.size(0), V = logits.size(1);
  const Tensor lc = logits.contiguous();
  const Tensor tc = targets.contiguous();
  const int64_t* t = tc.data<int64_t>();
  int64_t n_valid = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (t[n] == ignore_index) continue;
    ATTN_CHECK(t[n] >= 0 && t[n] < V, op, "target ", t[n], " at row ", n, " is outside [0, ", V,
               ") for logits ", logits.str(), " (ignore_index ", ignore_index, ")");
    ++n_valid;
  }
  Tensor lse = Tensor::empty({N}, logits.dtype());  // [N]
  const double total = logits.dtype() == DType::F32
                           ? forward_run<float>(lse, lc, tc, ignore_index, label_smoothing)
                           : forward_run<double>(lse, lc, tc, ignore_index, label_smoothing);
  // Mean over the rows that count; with none, the loss is 0 (PyTorch would give NaN).
  const double loss = n_valid > 0 ? total / static_cast<double>(n_valid) : 0.0;
  Tensor out = Tensor::scalar(loss, logits.dtype());  // []
  if (needs_grad({&logits})) {
    auto node = std::make_shared<CrossEntropyBackward>();
    node->logits = lc.detach();
    node->targets = tc.detach();
    node->lse = lse;
    node->ignore_index = ignore_index;
    node->label_smoothing = label_smoothing;
    node->n_valid = n_valid;
    attach_node(out, node, {logits, targets});
  }
  return out;
}

}  // namespace attn
