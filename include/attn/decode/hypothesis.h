// attn/decode/hypothesis.h — one decoded output sequence, as every search returns it.
// The length that length penalties see is tokens.size() + finished (EOS counts as a token,
// as in tensor2tensor and fairseq); BOS is never part of a hypothesis.
#pragma once

#include <cstdint>
#include <vector>

namespace attn::decode {

struct Hypothesis {
  std::vector<int64_t> tokens;  // the generated tokens, without BOS and without the final EOS
  double logprob = 0;           // sum of the model's log-probabilities of the generated tokens (EOS included)
  double score = 0;             // beam search: logprob / length penalty; greedy and sampling: logprob
  bool finished = false;        // true: ended with EOS; false: cut at the length limit

  // The number of generated tokens, EOS included.
  int64_t length() const { return static_cast<int64_t>(tokens.size()) + (finished ? 1 : 0); }
};

}  // namespace attn::decode
