// kernels/embedding.h — token embedding lookup (§3.4): rows of a [V, D] table picked by ids.
// Raw pointers and sizes; ids must already be checked to lie in [0, V) (src/ops/embedding.cpp
// does it). The sqrt(D) scaling and weight tying live in nn/embedding, not here.
#pragma once

#include <cstdint>

namespace attn::kernels {

// out[n, :] = weight[ids[n], :] for n < N; out [N, D], weight [V, D], ids [N].
template <class T>
void embedding_forward(T* out, const T* weight, const int64_t* ids, int64_t N, int64_t D);
// forward: out[n, d] = weight[ids[n], d];  d out[n, d] / d weight[v, d] = [ids[n] == v],
// so dweight[ids[n], :] += dout[n, :] (a scatter-add; repeated ids accumulate).
template <class T>
void embedding_backward(T* dweight, const T* dout, const int64_t* ids, int64_t N, int64_t D);

}  // namespace attn::kernels
