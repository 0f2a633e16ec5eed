// decode/sequence_score.cpp — see attn/decode/sequence_score.h.
#include "attn/decode/sequence_score.h"

#include <algorithm>

namespace attn::decode {

SequenceScore score_sequence(const std::vector<int64_t>& reference, const Hypothesis& output) {
  SequenceScore s;
  const std::vector<int64_t>& out = output.tokens;
  s.positions = static_cast<int64_t>(reference.size()) + 1;
  for (size_t i = 0; i < reference.size(); ++i)
    if (i < out.size() && out[i] == reference[i]) ++s.right;
  // The EOS position: right when the output stopped exactly after the reference's length.
  if (output.finished && out.size() == reference.size()) ++s.right;
  s.exact = output.finished && out == reference;
  return s;
}

void AccuracyCounts::add(const SequenceScore& s) {
  right += s.right;
  positions += s.positions;
  exact += s.exact ? 1 : 0;
  ++sequences;
}

double AccuracyCounts::token_acc() const { return static_cast<double>(right) / static_cast<double>(positions); }

double AccuracyCounts::exact_acc() const { return static_cast<double>(exact) / static_cast<double>(sequences); }

int64_t scoring_max_len(const std::vector<std::vector<int64_t>>& references) {
  size_t longest = 0;
  for (const auto& r : references) longest = std::max(longest, r.size());
  return static_cast<int64_t>(longest) + 1;
}

}  // namespace attn::decode
