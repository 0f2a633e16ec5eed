// attn/serve/explorer.h — the JSON behind the attention explorer (the page `attn serve` serves
// at /, docs/explorer.md): POST /v1/lab/attention, seed 000's widget computed by the library's
// own fused attention op on given or random Q, K, V; and POST /v1/attention, the attention
// weights a served model uses on an input (and its output), per stack, layer and head.
// Every wrong field is an ApiError 400 naming it.
// Not here: HTTP (server.cpp), the page itself (src/serve/www/), drawing (report/).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attn/run/model_folder.h"
#include "attn/serve/text.h"

namespace attn::serve {

// The lab's limits: queries T and keys S up to 16, feature sizes up to 64.
constexpr int64_t kLabMaxTokens = 16;
constexpr int64_t kLabMaxDim = 64;

// POST /v1/lab/attention. Request: either "q" [T][D], "k" [S][D] and "v" [S][Dv] (numbers), or
// "queries" T, "keys" S, "dim" D (= Dv) and "seed" for N(0, 1) draws rounded to one decimal (as
// `attn lab steps`); "tau" > 0 (default sqrt(D)): the scores are divided by tau; "causal" (query
// i may not see key j > i + S - T); "pad": the key indices that are padding. Answer: q, k, v,
// tau, "scores" Q K^T, "scaled" Q K^T / tau (null where masked), "masked" (true where masked),
// "weights" softmax of each row (masked cells exactly 0, a fully masked row all 0) and "output"
// weights V [T][Dv], the weights and output being scaled_dot_product_attention's.
nlohmann::json lab_attention(const nlohmann::json& request);

// The request of POST /v1/attention: "input" (text), optionally "output" (text, teacher-forced).
struct AttentionRequest {
  std::string input;
  std::optional<std::string> output;
};
AttentionRequest parse_attention_request(const nlohmann::json& request);

// The attention weights of one pass of the folder's model. Encoder-decoder: the source is the
// input's tokens; the decoder reads <bos> + output (the greedy translation when no output is
// given, computed here), so decoder query i is the position that predicted output token i and
// the last one EOS; "encoder_self", "decoder_self" and "cross". Decoder-only: the model reads
// [<bos>] + input + output; "self". Encoder-only: the input; "self". Each stack is
// [layer][head][query][key]. Token labels: "source_tokens" / "target_tokens" (the decoder's
// input) or "tokens"; "output" is the output text and "output_tokens" its tokens. Must be called
// while nothing else uses the model (Engine::with_model).
nlohmann::json model_attention(const run::GenerationFolder& opened, const TextCodec& codec,
                               const AttentionRequest& request);

// GET /v1/figures/NAME.svg: seed 001's figures of the served model (model_figures/):
// "architecture" (fig 1, from its config), "multihead" (fig 4, its sizes for `tokens` tokens)
// and "steps" (fig 3: the scaled dot-product steps of head 1 of its first self-attention layer
// over `input`, the ids /v1/attention reads for it, at most model_figures::kStepsMaxTokens; an
// ApiError 400 without input). Another name is an ApiError 404. "steps" runs the model: call it
// while nothing else uses it (Engine::with_model).
std::string model_figure(const run::GenerationFolder& opened, const TextCodec& codec, const std::string& name,
                         int64_t tokens, const std::optional<std::string>& input = std::nullopt);

}  // namespace attn::serve
