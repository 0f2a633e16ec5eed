// run/translate.cpp — see attn/run/translate.h. Deliberately no threading of its own: the
// ops' kernels parallelise inside each call.
#include "attn/run/translate.h"

#include <algorithm>
#include <cmath>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/decode/speculative.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/ops/ops.h"
#include "attn/run/token_codec.h"
#include "search_options.h"

namespace attn::run {

void validate(const SearchSettings& s) {
  ATTN_CHECK(s.beam >= 1 && s.beam <= decode::kMaxBeam, "search", "--beam must be in [1, ", decode::kMaxBeam,
             "], got ", s.beam);
  ATTN_CHECK(s.n_best >= 1 && s.n_best <= s.beam, "search", "--n-best must be in [1, --beam] = [1, ", s.beam, "], got ",
             s.n_best);
  ATTN_CHECK(std::isfinite(s.alpha) && s.alpha >= 0, "search", "--alpha must be finite and >= 0, got ", s.alpha);
  ATTN_CHECK(!s.max_len || (*s.max_len >= 1 && *s.max_len <= kMaxOutputTokens), "search", "--max-len must be in [1, ",
             kMaxOutputTokens, "], got ", s.max_len ? *s.max_len : 0);
  if (s.speculative.enabled()) {
    validate(s.speculative);
    ATTN_CHECK(s.beam == 1 && s.n_best == 1, "search", s.speculative.lookup ? "--prompt-lookup" : "--draft",
               " works with greedy search, not --beam ", s.beam, " / --n-best ", s.n_best);
  }
}

std::vector<std::vector<decode::Hypothesis>> search_batch(const ModelFolder& folder,
                                                          const std::vector<std::vector<int64_t>>& srcs,
                                                          const SearchSettings& settings) {
  validate(settings);
  NoGradGuard no_grad;
  decode::TransformerDecoder decoder(*folder.model);
  const Tensor src = pad_batch(srcs, folder.pad);
  std::vector<std::vector<decode::Hypothesis>> out;
  // Learned target positions end at max_len: a target of max_len generated tokens (the last
  // never fed back) is the longest the decoder can place, whatever the limit asked for.
  const models::ModelConfig& c = folder.model->config();
  // The paged KV cache's worst case: every hypothesis of every source at the length limit
  // (plus a draft's proposals).
  int64_t longest = 0;
  for (const auto& s : srcs) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  const int64_t kv_positions = (settings.max_len ? *settings.max_len : longest + 50) + 2 +
                               (settings.speculative.enabled() ? settings.speculative.draft_tokens : 0);
  const int64_t kv_rows = static_cast<int64_t>(srcs.size()) * settings.beam;
  decoder.set_kv_pool(detail::kv_pool(c, settings.kv_cache, kv_rows, kv_positions));
  std::optional<int64_t> positions;
  if (c.positional == nn::PositionalKind::Learned) positions = c.max_len;
  if (settings.speculative.enabled()) {
    const SpeculativeSettings& spec = settings.speculative;
    auto o = detail::search_options<decode::GreedyOptions>(folder, settings.max_len);
    o.max_positions = positions;
    decode::SpeculativeOptions so;
    so.draft_tokens = spec.draft_tokens;
    decode::SpeculativeStats stats;
    std::vector<decode::Hypothesis> found;
    if (spec.draft != nullptr) {
      check_draft(folder, *spec.draft, "translate");
      decode::TransformerDecoder draft(*spec.draft->model);
      draft.set_kv_pool(detail::kv_pool(spec.draft->model->config(), settings.kv_cache, kv_rows, kv_positions));
      found = decode::speculative_greedy(decoder, draft, src, o, so, &stats);
    } else {
      found = decode::lookup_greedy(decoder, src, o, so, &stats);
    }
    if (spec.stats != nullptr) add_stats(*spec.stats, stats);
    for (decode::Hypothesis& h : found) out.push_back({std::move(h)});
    return out;
  }
  if (settings.beam == 1 && settings.n_best == 1) {
    auto o = detail::search_options<decode::GreedyOptions>(folder, settings.max_len);
    o.max_positions = positions;
    for (decode::Hypothesis& h : decode::greedy_search(decoder, src, o)) out.push_back({std::move(h)});
    return out;
  }
  auto o = detail::search_options<decode::BeamOptions>(folder, settings.max_len);
  o.max_positions = positions;
  o.beam = settings.beam;
  o.alpha = settings.alpha;
  o.n_best = settings.n_best;
  return decode::beam_search(decoder, src, o);
}

// ---- teacher forcing ----------------------------------------------------------------------

double ForcedScores::total() const {
  double s = 0;
  for (double v : logprobs) s += v;
  return s;
}

std::vector<ForcedScores> teacher_forced(const ModelFolder& folder, const std::vector<std::vector<int64_t>>& srcs,
                                         const std::vector<std::vector<int64_t>>& tgts) {
  ATTN_CHECK(srcs.size() == tgts.size() && !srcs.empty(), "teacher_forced", srcs.size(), " sources and ", tgts.size(),
             " targets");
  ATTN_CHECK(folder.eos >= 0, "teacher_forced",
             "the model has no EOS token (eos_id = -1), so a target's end cannot be scored");
  NoGradGuard no_grad;
  std::vector<std::vector<int64_t>> tgt_in;
  tgt_in.reserve(tgts.size());
  for (const auto& t : tgts) {
    std::vector<int64_t> row{folder.bos};
    row.insert(row.end(), t.begin(), t.end());
    tgt_in.push_back(std::move(row));
  }
  const Tensor src = pad_batch(srcs, folder.pad);
  const Tensor in = pad_batch(tgt_in, folder.pad);
  const Tensor lp = log_softmax(folder.model->forward(src, in));  // [B, T, V]
  const int64_t T = lp.size(1), V = lp.size(2);
  const std::vector<double> values = lp.to_vector<double>();
  std::vector<ForcedScores> out(tgts.size());
  for (size_t b = 0; b < tgts.size(); ++b) {
    const auto& t = tgts[b];
    for (size_t i = 0; i <= t.size(); ++i) {
      const int64_t want = i < t.size() ? t[i] : folder.eos;
      const double* row = values.data() + (static_cast<int64_t>(b) * T + static_cast<int64_t>(i)) * V;
      ATTN_CHECK(want >= 0 && want < V, "teacher_forced", "target id ", want, " is outside the vocabulary [0, ", V,
                 ")");
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[best]) best = v;
      out[b].logprobs.push_back(row[want]);
      out[b].argmax.push_back(best);
    }
  }
  return out;
}

}  // namespace attn::run
