// cli/lm_io.h — what `attn generate`, `attn fill-mask` and the samples at the end of
// `attn train` share for the single-stack models: continuing prompts with a decoder-only model
// (greedy, beam search or sampling over decode::LmDecoder, the KV-cached IncrementalDecoder),
// and ranking the candidates for every [MASK] of a text with an encoder-only model.
// Not here: reading stdin or printing (the commands do that), subword tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/decode/hypothesis.h"
#include "attn/train/vocab.h"
#include "infer_io.h"

namespace attn::cli {

// How `attn generate` continues prompts.
struct GenerateSettings {
  enum class Mode { Greedy, Beam, Sample };
  Mode mode = Mode::Greedy;
  int64_t beam = 4;          // Beam: live hypotheses per prompt
  double alpha = 0.6;        // Beam: GNMT length-penalty exponent
  int64_t n_best = 1;        // Beam: hypotheses returned per prompt, in [1, beam]
  double temperature = 1.0;  // Sample: > 0
  int64_t top_k = 0;         // Sample: >= 0 (0: no top-k filter)
  double top_p = 1.0;        // Sample: in (0, 1]
  uint64_t seed = 0;         // Sample: each prompt of a batch draws from its own stream of it
  int64_t max_tokens = 50;   // generated tokens at most, EOS included (>= 1)
  // The model reads <bos> + prompt. Off for GPT-2 checkpoints, which read the prompt as it is
  // (as Hugging Face's generate does); <|endoftext|> is then only their end-of-text token.
  bool prepend_bos = true;
};
// Throws attn::Error naming the first invalid setting (as its command-line flag).
void validate(const GenerateSettings& settings);

// Continues every prompt (token ids without <bos>, each non-empty and free of PAD): the model
// reads <bos> + prompt (or the prompt alone, see prepend_bos) and generates until <eos> or max_tokens. With learned positions a prompt
// whose <bos> + tokens exceed max_len is an error naming it, and generation stops where the
// positions end (prompt + generated tokens - 1 <= max_len). Returns each prompt's hypotheses,
// best first (n_best for beam search, one otherwise).
std::vector<std::vector<decode::Hypothesis>> generate_batch(const ModelFolder& folder,
                                                            const std::vector<std::vector<int64_t>>& prompts,
                                                            const GenerateSettings& settings);

// The literal that marks a masked position in fill-mask input.
inline constexpr const char* kMaskMarker = "[MASK]";

// The ids of a fill-mask text: the text is cut at every "[MASK]", the pieces are tokenized as
// the vocabulary says (split_tokens) and the mask id goes between them. No mask, an empty
// text, an unknown token or invalid UTF-8 is an attn::Error "[command] <where>: ...".
std::vector<int64_t> read_masked_text(const std::string& text, const train::Vocab& vocab, const std::string& command,
                                      const std::string& where);

// The ranked candidates of one masked position.
struct MaskPrediction {
  int64_t position = 0;                                // token index in the sequence
  std::vector<std::pair<int64_t, double>> candidates;  // (id, probability), most probable first
};

// For every sequence (ids holding the vocabulary's mask id at least once), every masked
// position's `top_k` most probable symbols (special tokens are never candidates; ties: the
// lower id) with their probability under the full softmax. One batched forward pass, PAD keys
// masked; with learned positions a sequence longer than max_len is an error naming it.
std::vector<std::vector<MaskPrediction>> fill_masks(const ModelFolder& folder,
                                                    const std::vector<std::vector<int64_t>>& sequences,
                                                    int64_t top_k);

}  // namespace attn::cli
