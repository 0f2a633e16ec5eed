// make_kv_pool (decode/kv_pool.h): a model's block pool from its configuration.
#include "attn/decode/kv_pool.h"

#include "attn/core/error.h"

namespace attn::decode {

namespace {

constexpr const char* kOp = "kv_pool";

struct Geometry {
  int64_t layers, kv_heads, head_dim;
};

Geometry geometry(const models::ModelConfig& config) {
  ATTN_CHECK(config.arch != models::Arch::EncoderOnly, kOp, "an encoder-only model has no KV cache");
  ATTN_CHECK(config.n_heads >= 1 && config.d_model % config.n_heads == 0, kOp, "d_model ", config.d_model,
             " is not a multiple of n_heads ", config.n_heads);
  return {config.n_decoder_layers, config.n_kv_heads > 0 ? config.n_kv_heads : config.n_heads,
          config.d_model / config.n_heads};
}

}  // namespace

const char* kv_dtype_name(DType kv_dtype) {
  ATTN_CHECK(kv_dtype == DType::F32 || kv_dtype == DType::BF16, kOp, "the KV cache dtype is f32 or bf16, got ",
             dtype_name(kv_dtype));
  return kv_dtype == DType::BF16 ? "bf16" : "f32";
}

DType parse_kv_dtype(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  fail(kOp, "the KV cache dtype must be f32 or bf16, got '", name, "'");
}

DType kv_block_dtype(const models::ModelConfig& config, DType kv_dtype) {
  kv_dtype_name(kv_dtype);  // f32 or bf16
  if (kv_dtype == DType::F32) return config.dtype;
  // An f64 model's keys would be rounded twice (to f32, then to bf16), and the f64 kernels
  // would widen them back: not a cache anyone needs.
  ATTN_CHECK(config.dtype == DType::F32, kOp, "a bf16 KV cache (--kv-dtype bf16) needs an f32 model; this one is ",
             dtype_name(config.dtype));
  return DType::BF16;
}

int64_t kv_block_bytes(const models::ModelConfig& config, int64_t block_size, DType kv_dtype) {
  ATTN_CHECK(block_size >= 1 && block_size <= 4096, kOp, "the block size must be in [1, 4096] positions, got ",
             block_size);
  const Geometry g = geometry(config);
  return nn::BlockPool::bytes_per_block(g.layers, g.kv_heads, g.head_dim, kv_block_dtype(config, kv_dtype),
                                        block_size);
}

int64_t kv_blocks_for(int64_t rows, int64_t positions, int64_t block_size) {
  ATTN_CHECK(rows >= 0 && positions >= 0 && block_size >= 1, kOp, "bad sizes: rows ", rows, ", positions ",
             positions, ", block ", block_size);
  return checked_mul(rows, (positions + block_size - 1) / block_size, kOp, "the blocks needed");
}

std::shared_ptr<nn::BlockPool> make_kv_pool(const models::ModelConfig& config, int64_t block_size, int64_t bytes,
                                            DType kv_dtype) {
  const int64_t per_block = kv_block_bytes(config, block_size, kv_dtype);
  const int64_t blocks = bytes / per_block;
  ATTN_CHECK(bytes > 0 && blocks >= 1, kOp, "a KV pool of ", bytes, " bytes holds no block of ", block_size,
             " positions (", per_block, " bytes for this model)");
  const Geometry g = geometry(config);
  return std::make_shared<nn::BlockPool>(g.layers, g.kv_heads, g.head_dim, kv_block_dtype(config, kv_dtype),
                                         block_size, blocks);
}

std::shared_ptr<nn::BlockPool> kv_pool_for(const models::ModelConfig& config, const KvCacheOptions& options,
                                           int64_t rows, int64_t positions) {
  ATTN_CHECK(options.paged || options.dtype == DType::F32, kOp,
             "a bf16 KV cache needs the paged layout (--kv-cache paged)");
  if (!options.paged) return nullptr;
  const int64_t per_block = kv_block_bytes(config, options.block_size, options.dtype);
  const int64_t bytes = options.pool_bytes > 0
                            ? options.pool_bytes
                            : checked_mul(kv_blocks_for(rows, positions, options.block_size) + 1, per_block, kOp,
                                          "the KV pool size");
  return make_kv_pool(config, options.block_size, bytes, options.dtype);
}

}  // namespace attn::decode
