// attn/models/gpt2.h — Hugging Face GPT-2 checkpoints (Radford et al. 2019) as DecoderOnlyModel:
// a folder with config.json (n_embd, n_head, n_layer, n_positions, vocab_size, n_inner,
// layer_norm_epsilon, activation_function, ...), model.safetensors under Hugging Face's names,
// and the byte-level BPE files (io/bpe.h). GPT-2 is our decoder-only model with pre-norm, a
// final norm, learned positions (max_len = n_positions), tanh GELU ("gelu_new"), unscaled
// embeddings, the output tied to wte, and no PAD token; <|endoftext|> is BOS and EOS.
// Not here: pytorch_model.bin (pickle), sharded checkpoints, GPT-2 variants that scale
// attention by layer index, and cross-attention.
//
// ---- Tensor names (with or without the "transformer." prefix of GPT2LMHeadModel) ----------
//   wte.weight [V, D]                       embedding.weight
//   wpe.weight [P, D]                       pos_embedding.weight
//   h.N.ln_1.{weight,bias} [D]              layers.N.norm1.*
//   h.N.attn.c_attn.weight [D, 3D]          layers.N.self_attn.in_proj_weight [3D, D]  (transposed)
//   h.N.attn.c_attn.bias [3D]               layers.N.self_attn.in_proj_bias
//   h.N.attn.c_proj.weight [D, D]           layers.N.self_attn.out_proj.weight         (transposed)
//   h.N.attn.c_proj.bias [D]                layers.N.self_attn.out_proj.bias
//   h.N.ln_2.{weight,bias} [D]              layers.N.norm2.*
//   h.N.mlp.c_fc.weight [D, F]              layers.N.linear1.weight [F, D]             (transposed)
//   h.N.mlp.c_fc.bias [F]                   layers.N.linear1.bias
//   h.N.mlp.c_proj.weight [F, D]            layers.N.linear2.weight [D, F]             (transposed)
//   h.N.mlp.c_proj.bias [D]                 layers.N.linear2.bias
//   ln_f.{weight,bias} [D]                  norm.*
//   lm_head.weight [V, D]                   optional when tied (then equal to wte.weight);
//                                           required with "tie_word_embeddings": false
// GPT-2's Conv1D stores weights [in, out] and computes x W + b: the transpose of nn.Linear.
// The attention mask buffers h.N.attn.bias [1, 1, P, P] and h.N.attn.masked_bias [] that
// older checkpoints carry are checked for shape and skipped. Weights in F32, F64, F16 or
// BF16 are converted to the requested dtype.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "attn/io/bpe.h"
#include "attn/io/safetensors.h"
#include "attn/models/config.h"
#include "attn/models/decoder_only.h"

namespace attn::models {

// A Hugging Face GPT-2 config.json object -> ModelConfig. Required keys: n_embd, n_head,
// n_layer, n_positions, vocab_size; optional: n_inner (null = 4 n_embd), layer_norm_epsilon
// (1e-5), activation_function ("gelu_new", also "gelu_pytorch_tanh" and "gelu_fast"; "gelu";
// "relu"), resid_pdrop and attn_pdrop (0.1), bos_token_id and eos_token_id (null or absent:
// none), tie_word_embeddings (true), model_type ("gpt2"). Settings we cannot honour
// (scale_attn_weights false, scale_attn_by_inverse_layer_idx true, add_cross_attention true,
// another activation or model_type) are errors; other keys are ignored. Validated.
ModelConfig gpt2_config_from_json(const nlohmann::json& hf, DType dtype = DType::F32);

// The reverse: a GPT-2-shaped ModelConfig -> a Hugging Face config.json object. A config that
// GPT-2 cannot express (not decoder_only, post-norm, no final norm, RMSNorm, not learned
// positions, scaled embeddings, a PAD token) is an error naming the field.
nlohmann::json gpt2_config_to_json(const ModelConfig& config);

// True when dir/config.json is a Hugging Face GPT-2 config ("model_type": "gpt2", or the
// n_embd and n_layer keys without our "arch"). Never throws.
bool is_gpt2_folder(const std::string& dir);

// The model's parameters under Hugging Face's names and layouts (Conv1D weights transposed;
// lm_head.weight only when untied), ready for save_safetensors.
io::NamedTensors gpt2_state_dict(const DecoderOnlyModel& model);

// Writes dir/config.json (gpt2_config_to_json) and dir/model.safetensors (gpt2_state_dict,
// metadata {"format": "pt"}), creating the folder. No tokenizer files.
void save_gpt2(const std::string& dir, const DecoderOnlyModel& model);

// Loads dir/config.json and dir/model.safetensors strictly: every missing, unexpected,
// repeated or mis-shaped tensor, an unsupported dtype, or an lm_head.weight that differs
// from the tied wte.weight is listed in one attn::Error naming the file and the tensors. The
// model is returned in eval mode, its weights converted to `dtype` (F32 or F64).
std::shared_ptr<DecoderOnlyModel> load_gpt2_model(const std::string& dir, DType dtype = DType::F32);

// A GPT-2 folder's model and tokenizer.
struct Gpt2 {
  std::shared_ptr<DecoderOnlyModel> model;
  io::BpeTokenizer tokenizer;
};

// load_gpt2_model plus the tokenizer (vocab.json or encoder.json, merges.txt or vocab.bpe).
// The tokenizer must fit the model (vocab_size >= its tokens). BOS and EOS are config.json's
// bos_token_id / eos_token_id, or <|endoftext|> when config.json has none; a config id that
// differs from the tokenizer's <|endoftext|> is an error.
Gpt2 load_gpt2(const std::string& dir, DType dtype = DType::F32);

}  // namespace attn::models
