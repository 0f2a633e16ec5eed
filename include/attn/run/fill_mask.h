// attn/run/fill_mask.h — ranking the candidates for every [MASK] of a text with an
// encoder-only model folder (what `attn fill-mask` prints): one encoder pass and a softmax at
// the masked positions, in eval mode under NoGradGuard.
// Not here: reading stdin or printing (the command does that), BERT's training-time masking.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attn/io/vocab.h"
#include "attn/run/model_folder.h"

namespace attn::run {

// The literal that marks a masked position in fill-mask input.
inline constexpr const char* kMaskMarker = "[MASK]";

// The ids of a fill-mask text: the text is cut at every "[MASK]", the pieces are tokenized as
// the vocabulary says (split_tokens) and the mask id goes between them. No mask, an empty
// text, an unknown token or invalid UTF-8 is an attn::Error "[command] <where>: ...".
std::vector<int64_t> read_masked_text(const std::string& text, const io::Vocab& vocab, const std::string& command,
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

}  // namespace attn::run
