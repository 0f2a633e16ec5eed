// kernels/gemm_direct.h — the float GEMM of products that run on one thread (each training
// shard's products, one-thread runs), AVX-512F register tiles that read A where it lies.
// OpenBLAS packs both operands into panels on every call; on the small products of a training
// step (64 to 300 rows, inner sizes 14 to 288) its packing takes about a fifth of the call.
// Here only B is laid out, one panel of 64 columns at a time (copied, or transposed for
// op(B) = B^T), and the register tile broadcasts the elements of A straight from A, row-major
// or transposed alike. gemm() hands a product here when no threads are available to it
// (kernels/parallel_for.h) and the active ISA is AVX-512 (simd/isa.h); OpenBLAS otherwise.
#pragma once

#include <cstdint>

namespace attn::kernels {

// Whether gemm_direct can run: this binary and CPU run AVX-512F and it is the active ISA.
bool gemm_direct_supported();

// The largest K gemm_direct takes (its panel of B holds K x 64 floats, a buffer the thread keeps).
inline constexpr int64_t kDirectMaxK = 4096;
// The fewest rows, and the fewest multiply-adds (M * N * K), of a product gemm takes to
// gemm_direct. Below them OpenBLAS runs its small-matrix kernels, which pack nothing either and
// were as fast or faster (a row of attention scores in decoding, M = 1, took 0.06 us there and
// 0.25 us here, where B^T is transposed first); from 64 rows and 2^17 multiply-adds on, gemm_direct
// was as fast or up to 1.35x faster (a single thread of Zen 5).
inline constexpr int64_t kDirectMinRows = 64;
inline constexpr int64_t kDirectMinWork = int64_t{1} << 17;

// Whether gemm<float> hands this product to gemm_direct: op(A) and op(B) not both transposed,
// M >= kDirectMinRows, M * N * K >= kDirectMinWork, K <= kDirectMaxK, no threads available to
// the caller (kernels/parallel_for.h), and gemm_direct_supported().
bool use_direct(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K);

// C[M, N] = alpha * op(A)[M, K] op(B)[K, N] (+ bias) + beta * C, row-major with row strides lda,
// ldb, ldc of the stored matrices (as gemm()), on the calling thread; not both trans_a and
// trans_b. Each output is one float sum over k = 0, 1, ..., K - 1 in order, a fused multiply-add
// per term; then r = alpha * sum; then r = r + bias[n] when `bias` is not null (the bias vector
// of N floats, the same for every row); then C = beta * C + r as one fused multiply-add (beta = 0
// ignores C's contents, as BLAS does). So the bits depend on no blocking, size or place in C.
// Requires gemm_direct_supported().
void gemm_direct(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr);

}  // namespace attn::kernels
