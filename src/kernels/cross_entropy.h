// kernels/cross_entropy.h — softmax cross-entropy with ignore_index and label smoothing.
// The training loss of §5 with the label smoothing of §5.4 (eps_ls = 0.1), matching
// torch.nn.CrossEntropyLoss. The log-softmax is fused: only per-row statistics are stored,
// never an [N, V] probability matrix. Raw pointers, contiguous rows, float and double.
// Targets must already be validated (in [0, V) or equal to ignore_index).
#pragma once

#include <cstdint>

namespace attn::kernels {

// Per row n with target t != ignore_index, lse = log(sum_v exp(x[n, v])):
//   losses[n] = (1 - eps) * (lse - x[n, t]) + eps / V * sum_v (lse - x[n, v]),  lse_out[n] = lse.
// Ignored rows get losses[n] = 0 and lse_out[n] = 0. The caller averages over valid rows.
template <class T>
void cross_entropy_forward(T* losses, T* lse_out, const T* logits, const int64_t* targets,
                           int64_t N, int64_t V, int64_t ignore_index, double label_smoothing);

// dlogits[n, v] += scale * (softmax(x[n])[v] - ((1 - eps) * [v == t] + eps / V)) for valid
// rows (scale = dloss / n_valid); ignored rows are left untouched.
template <class T>
void cross_entropy_backward(T* dlogits, const T* lse, const T* logits, const int64_t* targets,
                            int64_t N, int64_t V, int64_t ignore_index, double label_smoothing,
                            T scale);

}  // namespace attn::kernels
