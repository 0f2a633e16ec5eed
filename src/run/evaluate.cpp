// run/evaluate.cpp — see attn/run/evaluate.h. The search accuracies are decode::score_sequence's,
// the definition training's validation uses, so eval on a run's validation set reproduces its
// last val_token_acc and val_exact_acc exactly.
#include "attn/run/evaluate.h"

#include <algorithm>
#include <cmath>

#include "attn/core/error.h"
#include "attn/decode/sequence_score.h"

namespace attn::run {

EvalMetrics evaluate(const ModelFolder& folder, const std::vector<io::Example>& examples, int64_t batch_size,
                     const SearchSettings& settings) {
  ATTN_CHECK(!examples.empty(), "eval", "no examples to evaluate");
  ATTN_CHECK(batch_size >= 1, "eval", "--batch-size must be >= 1, got ", batch_size);
  EvalMetrics m;
  double nll = 0;
  int64_t forced_right = 0;
  decode::AccuracyCounts searched;
  for (size_t start = 0; start < examples.size(); start += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(examples.size(), start + static_cast<size_t>(batch_size));
    std::vector<std::vector<int64_t>> srcs, tgts;
    for (size_t i = start; i < end; ++i) {
      srcs.push_back(examples[i].src);
      tgts.push_back(examples[i].tgt);
    }
    const std::vector<ForcedScores> forced = teacher_forced(folder, srcs, tgts);
    // Greedy outputs longer than the longest reference + EOS are wrong whatever follows, so
    // greedy search stops there (as the trainer's validation does); beam search is not cut,
    // since a shorter limit can change which hypothesis wins.
    SearchSettings s = settings;
    if (!s.max_len && s.beam == 1 && s.n_best == 1) s.max_len = decode::scoring_max_len(tgts);
    const auto found = search_batch(folder, srcs, s);
    for (size_t k = 0; k < srcs.size(); ++k) {
      const auto& tgt = tgts[k];
      for (size_t i = 0; i <= tgt.size(); ++i) {
        const int64_t want = i < tgt.size() ? tgt[i] : folder.eos;
        nll -= forced[k].logprobs[i];
        if (forced[k].argmax[i] == want) ++forced_right;
      }
      searched.add(decode::score_sequence(tgt, found[k].front()));
      m.tokens += static_cast<int64_t>(tgt.size()) + 1;
    }
    m.examples += static_cast<int64_t>(srcs.size());
  }
  const double tokens = static_cast<double>(m.tokens);
  m.loss = nll / tokens;
  m.perplexity = std::exp(m.loss);
  m.token_acc = searched.token_acc();
  m.forced_token_acc = static_cast<double>(forced_right) / tokens;
  m.exact_acc = searched.exact_acc();
  return m;
}

}  // namespace attn::run
