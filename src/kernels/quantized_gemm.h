// kernels/quantized_gemm.h — y = x W^T (+ bias) with reduced-precision weights for inference:
// int8 weights with a float scale per output row, and bfloat16 weights. Raw pointers, row-major,
// no allocation by the caller; each product is split over OpenMP threads by weight rows when
// the weight is large and the caller is not already in a parallel region. Not here: the float
// products (gemm.h), the tensors and checks (ops/quantize.h).
//
// ---- int8 (CTranslate2's scheme, per row and symmetric) ------------------------------------
// A row r of a matrix is quantized with amax = max_k |r[k]|, q[k] = rint(r[k] * (127 / amax))
// (ties to even) clamped to [-127, 127] (never -128), and the dequantization scale
// s = amax / 127, so r[k] ~ s * q[k]; an all-zero row gets q = 0, s = 1. A row with a NaN or
// Inf (activations only: weights are checked when made and loaded) gets q = 0 and s = NaN, so
// its outputs are NaN. Weights are quantized once (quantize_rows_s8), activations per row at
// every call, so a row's result never depends on the other rows of the batch.
//   acc[m, n] = sum_k xq[m, k] * wq[n, k] in int32 (exact: |acc| <= 127^2 K, so K < 133,000),
//   y[m, n]   = float(acc) * (x_scale[m] * w_scale[n])  (+ bias[n], a separate rounded add).
// Every path computes the same integer accumulators and the same float epilogue, so the
// results are bit-identical on every path:
//   - AVX-512 VNNI: vpdpbusd multiplies u8 by s8. The weights are the u8 operand, shifted to
//     w + 128 by one XOR of the sign bit as they are loaded, and the shift is taken back
//     exactly in int32 (mod 2^32): sum_k (w + 128) xq - 128 sum_k xq, with sum_k xq one sum per
//     activation row per call (no weight row sums, no copy of x). K tails use masked loads.
//   - AVX2: ggml's sign trick, vpmaddubsw(|xq|, sign(xq) * wq): both factors lie in
//     [-127, 127], so a pair of products is at most 2 * 127^2 = 32,258 and the s16 saturation
//     of vpmaddubsw never happens; vpmaddwd widens to int32. K tails in scalar code.
//   - scalar: the plain int32 loop (the reference).
//   Many activation rows (M >= 16, K a multiple of 4) on VNNI take packed weight panels instead:
//   64 weight rows interleaved by groups of four k, the activation's four bytes broadcast, so one
//   activation word feeds 64 outputs and no lane sums are left (integer sums: the same values).
//   - AMX (amx_int8): from 16 activation rows, tdpbssd on tiles of 16 weight rows x 64 k and
//     the activations' dwords (both signed: no shift); fewer rows take the VNNI kernels. The
//     same exact accumulators again.
// A weight byte of -128 would break the AVX2 path's exactness: weights must lie in
// [-127, 127] (int8_weights_in_range).
//
// ---- bf16 ---------------------------------------------------------------------------------
// W is bf16 [N, K]; x is rounded to bf16 (bf16_from_float, core/dtype.h: RNE, subnormals to
// zero). Each output y[m, n] is summed in float32 in this order, on every path:
//   16 lanes; chunk c covers k in [32c, 32c + 32), lane i takes the pair (k0 + 1, k0) with
//   k0 = 32c + 2i, as vdpbf16ps does: lane += x[k0+1] w[k0+1], then lane += x[k0] w[k0], each a
//   float32 FMA (exact product, one rounding) whose result is flushed to a signed zero when the
//   exact value is tiny, |v| < 2^-126, before rounding (the instruction's FTZ, as x86's
//   flush-to-zero decides it: a value that rounds up to 2^-126 is flushed too); positions
//   k >= K count as zeros; then the lanes are added as a tree: t8[i] = l[i] + l[i+8], t4[i] = t8[i] + t8[i+4], t2[i] =
//   t4[i] + t4[i+2], sum = t2[0] + t2[1]; y = sum (+ bias[n], one rounded add).
// Operands must hold no subnormal bf16 (vdpbf16ps reads them as zero; our conversion never
// makes one and loading flushes them, bf16_flush_subnormals). Under that condition the paths
// are bit-identical: AVX-512 BF16 (vdpbf16ps), AVX-512F and AVX2 (bf16 widened by a shift,
// vfmadd231ps under MXCSR's flush-to-zero) and the scalar emulation (std::fma, the flush
// decided exactly from the float64 sum and its TwoSum error). Many activation
// rows (M >= 32, K even) on the AVX-512 paths take packed weight panels: 16 outputs across the
// vector lanes, one accumulator per lane class i, the classes then added as the tree, which are
// the same operations per output in the same order (vdpbf16ps, or its FMAs under flush-to-zero
// where those run faster: bf16_path measures which). The error against a float64 product of the same bf16 operands is
// that of a float sum of K/16 + 4 terms per output: at most (K/16 + 5) * 2^-24 * (sum_k |x_k w_k| + |bias|).
//   The AMX path (amx_bf16: Intel's Sapphire Rapids and later, where Linux grants the tile
// state) is the exception: tdpbf16ps sums each output over k in chunks of 32, in order from +0,
// in the hardware's own order within a chunk, so its bits differ from the other paths'. They
// are the same for a row alone, in any batch, under any thread count and with either operand
// as the tile that is streamed; the error is at most (K + 5) * 2^-24 * (sum_k |x_k w_k| + |bias|)
// (float32 sums in any order), as the tests check. The products without a path argument run
// it from kAmxMinRows (8) activation rows and give fewer rows the vector path above, which is
// faster there, except in the batch-invariant mode (kernels/batch_invariant.h), where every M
// runs the tiles. ATTN_AMX=0 in the environment keeps the tiles out of bf16_path().
#pragma once

#include <cstdint>

namespace attn::kernels {

// The code paths of the quantized products. Which one runs follows the active ISA
// (simd/isa.h, ATTN_ISA): avx512 takes the AMX tiles (amx_int8, amx_bf16) where the CPU and OS
// have them and ATTN_AMX is not 0, else VNNI (int8) or BF16 (bf16) when the CPU has it, else
// AVX2 (int8) or the AVX-512F emulation (bf16); avx2 takes AVX2; scalar the scalar code.
enum class QuantPath : uint8_t { Scalar, Avx2, Avx512, Avx512Vnni, Avx512Bf16, Amx, AmxInt8 };

// "scalar", "avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx_bf16" (bf16 only), "amx_int8"
// (int8 only).
const char* quant_path_name(QuantPath path);
// Whether this build and CPU can run the path.
bool quant_path_supported(QuantPath path);
// The path the int8 (bf16) products take under the active ISA.
QuantPath int8_path();
QuantPath bf16_path();

// ---- bf16 conversion (every path gives bf16_from_float's bits) -----------------------------
// out[i] = bf16_from_float(x[i]); paths: Scalar, Avx2, Avx512 (integer emulation), Avx512Bf16
// (vcvtneps2bf16).
void f32_to_bf16(uint16_t* out, const float* x, int64_t n, QuantPath path);
void f32_to_bf16(uint16_t* out, const float* x, int64_t n);  // the active ISA's path
// out[i] = float_from_bf16(x[i]) (exact).
void bf16_to_f32(float* out, const uint16_t* x, int64_t n);
// Replaces every subnormal bf16 by a zero of its sign (what vdpbf16ps reads); returns how many.
int64_t bf16_flush_subnormals(uint16_t* x, int64_t n);

// ---- int8 ------------------------------------------------------------------------------------
// Quantizes `rows` rows of K floats (row r at x + r * ldx) as described above: q [rows, K]
// contiguous, scale [rows].
// Paths: Scalar and Avx2 (the scalar loop), Avx512 and its VNNI/BF16 variants (vectorized),
// all with the scalar loop's bits; the second form takes int8_path().
void quantize_rows_s8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t K, int64_t ldx,
                      QuantPath path);
void quantize_rows_s8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t K, int64_t ldx);
// Whether every byte of w lies in [-127, 127].
bool int8_weights_in_range(const int8_t* w, int64_t n);
// acc[m * N + n] = sum_k xq[m * K + k] * w[n * K + k]: the exact int32 accumulators.
void gemm_s8_accumulate(int32_t* acc, const int8_t* xq, int64_t M, const int8_t* w, int64_t N, int64_t K,
                        QuantPath path);
// What gemm_s8 and gemm_bf16 apply to each output as they store it: nothing, or ReLU with
// relu_forward's select (v < 0 ? 0 : v; -0 and NaN pass), the bits of the separate pass.
enum class Epilogue { None, ReLU };

// y[m * ldy + n] = the int8 product of x[m * ldx + :K] (quantized here, per row) and w [N, K]
// with scales w_scale [N], plus bias[n] when bias is not null, then the epilogue. Paths:
// Scalar, Avx2, Avx512Vnni.
void gemm_s8(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const int8_t* w, const float* w_scale,
             const float* bias, float* y, int64_t ldy, QuantPath path, Epilogue epilogue = Epilogue::None);
void gemm_s8(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const int8_t* w, const float* w_scale,
             const float* bias, float* y, int64_t ldy, Epilogue epilogue = Epilogue::None);  // int8_path()

// ---- bf16 ------------------------------------------------------------------------------------
// y[m * ldy + n] = sum_k bf16(x[m * ldx + k]) w[n * K + k] in the order above (+ bias[n]), then
// the epilogue. Paths: Scalar, Avx2, Avx512, Avx512Bf16, Amx.
void gemm_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w,
               const float* bias, float* y, int64_t ldy, QuantPath path, Epilogue epilogue = Epilogue::None);
void gemm_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, const float* bias,
               float* y, int64_t ldy, Epilogue epilogue = Epilogue::None);
// (bf16_path(), or for fewer than 8 rows outside the batch-invariant mode the vector path it
// would take without AMX; likewise the two halves below.)

// The same product in two halves, so that one product's outputs feed the next without a
// float32 copy (a feed-forward block's hidden rows): bf16 rows have a row stride of at least
// bf16_row_stride(K) (K rounded up to a multiple of 32, at least 32) and hold zeros from K on.
// gemm_bf16_output stores bf16_from_float of gemm_bf16's outputs (the epilogue applied first)
// at yb[m * ldyb + n] and zeros in [N, ldyb), ldyb >= bf16_row_stride(N); gemm_bf16_input takes
// activation rows already in bf16 (xb [M, ldb]) and gives gemm_bf16's outputs for the floats
// they stand for. So gemm_bf16_input(gemm_bf16_output(x)) has the bits of gemm_bf16 on the float
// outputs of the first product. A row stride too small is an attn::Error. bf16_row_pitch(K) is
// the stride to allocate: at least bf16_row_stride(K), an odd number of 32-element chunks, so
// that 16 consecutive rows fall on 16 different L1 cache sets (the AMX tiles read 16 rows at a
// time; at a stride of 1 KiB they fell on 4 and the products ran up to 2x slower).
int64_t bf16_row_stride(int64_t K);
int64_t bf16_row_pitch(int64_t K);
void gemm_bf16_output(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w,
                      const float* bias, uint16_t* yb, int64_t ldyb, QuantPath path, Epilogue epilogue = Epilogue::None);
void gemm_bf16_output(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w,
                      const float* bias, uint16_t* yb, int64_t ldyb, Epilogue epilogue = Epilogue::None);
void gemm_bf16_input(int64_t M, int64_t N, int64_t K, const uint16_t* xb, int64_t ldb, const uint16_t* w,
                     const float* bias, float* y, int64_t ldy, QuantPath path, Epilogue epilogue = Epilogue::None);
void gemm_bf16_input(int64_t M, int64_t N, int64_t K, const uint16_t* xb, int64_t ldb, const uint16_t* w,
                     const float* bias, float* y, int64_t ldy, Epilogue epilogue = Epilogue::None);

// ---- bf16 products of two float32 operands (mixed-precision training) ----------------------
// C[M, N] = op(A)[M, K] op(B)[K, N] (+ C when accumulate), op(X) = X or X^T, row-major with the
// stored matrices' row strides lda/ldb/ldc as kernels/gemm.h takes them (cblas, CblasRowMajor).
// Both operands are rounded to bf16 (bf16_from_float) and each output is the bf16 sum above with
// k running over the inner dimension: C[m, n] = sum_k bf16(op(A)[m, k]) bf16(op(B)[k, n]) in the
// lane order, then (accumulate) C[m, n] + sum, one rounded add. The operands are packed first
// (op(A) as rows of K, op(B) as its transpose, rows of K), so all four combinations of trans_a
// and trans_b run the same kernels and give the bits of gemm_bf16 on the packed operands, on
// every path. The work is split over OpenMP threads by blocks of rows and columns when the
// product is large and the caller is not in a parallel region; no output depends on the split,
// so the bits do not depend on the thread count either. Paths: Scalar, Avx2, Avx512, Avx512Bf16,
// Amx (every M: the products of training are not split by row count). With bias (not with
// accumulate): C[m, n] = sum + bias[n], one rounded add, the bits of C = bias then accumulating.
void gemm_bf16_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc, QuantPath path,
                   const float* bias = nullptr);
void gemm_bf16_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc,
                   const float* bias = nullptr);  // bf16_path()

}  // namespace attn::kernels
