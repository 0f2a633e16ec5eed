// Model: config validation, PAD masks, the embedding front end shared by all families
// (paper §3.4-3.5), and nn.Transformer's xavier initialisation of the stacks.
#include "attn/models/model.h"

#include <cmath>

#include "attn/nn/attention.h"
#include "attn/nn/init.h"
#include "attn/nn/moe.h"
#include "attn/nn/quantize.h"
#include "attn/ops/ops.h"

namespace attn::models {

Model::Model(ModelConfig config) : config_(std::move(config)) { config_.validate(); }

void Model::quantize(Quantization q) {
  ATTN_CHECK(config_.quantization == Quantization::None, "quantize", "the model is quantized already (",
             quantization_name(config_.quantization), "); quantize the float32 model instead");
  ATTN_CHECK(q != Quantization::None, "quantize", "no quantization given (int8 or bf16)");
  ATTN_CHECK(config_.dtype == DType::F32, "quantize", "only f32 models can be quantized, this one is ",
             dtype_name(config_.dtype));
  nn::quantize_module(*this, q);
  config_.quantization = q;
}

Tensor Model::padding_mask(const Tensor& ids) const {
  ATTN_CHECK(ids.dtype() == DType::I64 && ids.dim() == 2, "padding_mask", "ids must be i64 [B, T], got ",
             ids.str());
  if (config_.pad_id < 0) return Tensor();
  const auto values = ids.to_vector<int64_t>();
  std::vector<int> is_pad(values.size());
  for (size_t i = 0; i < values.size(); ++i) is_pad[i] = values[i] == config_.pad_id ? 1 : 0;
  return Tensor::from_bools(is_pad, ids.shape());  // [B, T]
}

Tensor Model::aux_loss() const {
  Tensor total;
  // named_modules() is not const; the traversal changes nothing.
  for (auto& [name, m] : const_cast<Model*>(this)->named_modules()) {
    const auto* moe = dynamic_cast<const nn::MixtureOfExperts*>(m);
    if (moe == nullptr || !moe->aux_loss().defined()) continue;
    total = total.defined() ? add(total, moe->aux_loss()) : moe->aux_loss();  // scalar
  }
  return total;
}

void Model::set_capture_attention(bool on) {
  ATTN_CHECK(!on || config_.attention != nn::AttentionKind::Linear || config_.arch == Arch::EncoderDecoder,
             "set_capture_attention", "linear attention forms no attention weights to capture (", arch_name(arch()),
             " with attention linear)");
  nn::set_capture_attention(*this, on);
}

std::vector<std::pair<std::string, Tensor>> Model::captured_attention() {
  return nn::captured_attention(*this);
}

double Model::embedding_init_std() const {
  return config_.scale_embeddings ? 1.0 / std::sqrt(static_cast<double>(config_.d_model)) : 0.02;
}

Tensor Model::embed(const nn::Embedding& embedding, const nn::PositionalEncoding* positions,
                    nn::Dropout& dropout, const Tensor& ids, int64_t offset) const {
  ATTN_CHECK(ids.dtype() == DType::I64 && ids.dim() == 2, "embed", "token ids must be i64 [B, T], got ",
             ids.str());
  Tensor x = embedding.forward(ids);                                                 // [B, T, D]
  if (config_.scale_embeddings) x = scale(x, std::sqrt(static_cast<double>(config_.d_model)));  // [B, T, D]
  if (positions) x = positions->forward(x, offset);                                  // [B, T, D]
  return dropout.forward(x);                                                         // [B, T, D]
}

Tensor Model::embed_at(const nn::Embedding& embedding, const nn::PositionalEncoding* positions_table,
                       nn::Dropout& dropout, const Tensor& ids, const Tensor& positions) const {
  ATTN_CHECK(ids.dtype() == DType::I64 && ids.dim() == 2, "embed", "token ids must be i64 [B, T], got ",
             ids.str());
  Tensor x = embedding.forward(ids);                                                 // [B, T, D]
  if (config_.scale_embeddings) x = scale(x, std::sqrt(static_cast<double>(config_.d_model)));  // [B, T, D]
  if (positions_table) x = positions_table->forward_at(x, positions);               // [B, T, D]
  return dropout.forward(x);                                                         // [B, T, D]
}

void Model::xavier_init_matrices(const nn::Module& stack, Rng& rng) {
  for (auto& [name, p] : stack.named_parameters())
    if (p.dim() > 1) nn::xavier_uniform_(p, rng);
}

}  // namespace attn::models
