// run/generate.cpp — see attn/run/generate.h. Generation hands <bos> + prompt to
// decode::LmDecoder (KV cache, left-aligned prompts) and lets the existing greedy, beam and
// sampling searches drive it; prompts that share a length limit are decoded together.
#include "attn/run/generate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/decode/lm_decoder.h"
#include "attn/decode/sampler.h"
#include "attn/decode/speculative.h"
#include "attn/models/decoder_only.h"
#include "attn/run/token_codec.h"
#include "search_options.h"

namespace attn::run {

namespace {

constexpr const char* kGenerate = "generate";

bool learned_positions(const models::ModelConfig& c) { return c.positional == nn::PositionalKind::Learned; }

// One search over a batch of rows <bos> + prompt, all with the same length limit.
std::vector<std::vector<decode::Hypothesis>> search(models::DecoderOnlyModel& model, const ModelFolder& folder,
                                                    const std::vector<std::vector<int64_t>>& rows,
                                                    const GenerateSettings& s, int64_t max_len) {
  const Tensor ids = pad_batch(rows, folder.pad);  // [B, S]
  decode::LmDecoder decoder(model);
  // The paged KV cache's worst case: every row (beam) at prompt + limit (plus a draft's proposals).
  const int64_t kv_rows = static_cast<int64_t>(rows.size()) * (s.mode == GenerateSettings::Mode::Beam ? s.beam : 1);
  const int64_t kv_positions = ids.size(1) + max_len + 2 + (s.speculative.enabled() ? s.speculative.draft_tokens : 0);
  decoder.set_kv_pool(detail::kv_pool(model.config(), s.kv_cache, kv_rows, kv_positions));
  std::vector<std::vector<decode::Hypothesis>> out;
  const SpeculativeSettings& spec = s.speculative;
  std::vector<decode::Hypothesis> found;
  if (spec.enabled()) {
    decode::SpeculativeOptions so;
    so.draft_tokens = spec.draft_tokens;
    decode::SpeculativeStats stats;
    std::unique_ptr<decode::LmDecoder> draft;
    if (spec.draft != nullptr) {
      draft = std::make_unique<decode::LmDecoder>(dynamic_cast<models::DecoderOnlyModel&>(*spec.draft->base));
      draft->set_kv_pool(detail::kv_pool(spec.draft->base->config(), s.kv_cache, kv_rows, kv_positions));
    }
    if (s.mode == GenerateSettings::Mode::Greedy) {
      const auto o = detail::search_options<decode::GreedyOptions>(folder, max_len);
      found = draft ? decode::speculative_greedy(decoder, *draft, ids, o, so, &stats)
                    : decode::lookup_greedy(decoder, ids, o, so, &stats);
    } else {
      auto o = detail::search_options<decode::SamplingOptions>(folder, max_len);
      o.temperature = s.temperature;
      o.top_k = s.top_k;
      o.top_p = s.top_p;
      o.seed = s.seed;
      found = draft ? decode::speculative_sample(decoder, *draft, ids, o, so, &stats)
                    : decode::lookup_sample(decoder, ids, o, so, &stats);
    }
    if (spec.stats != nullptr) add_stats(*spec.stats, stats);
    for (decode::Hypothesis& h : found) out.push_back({std::move(h)});
    return out;
  }
  switch (s.mode) {
    case GenerateSettings::Mode::Greedy: {
      const auto o = detail::search_options<decode::GreedyOptions>(folder, max_len);
      for (decode::Hypothesis& h : decode::greedy_search(decoder, ids, o)) out.push_back({std::move(h)});
      return out;
    }
    case GenerateSettings::Mode::Beam: {
      auto o = detail::search_options<decode::BeamOptions>(folder, max_len);
      o.beam = s.beam;
      o.alpha = s.alpha;
      o.n_best = s.n_best;
      return decode::beam_search(decoder, ids, o);
    }
    case GenerateSettings::Mode::Sample: {
      auto o = detail::search_options<decode::SamplingOptions>(folder, max_len);
      o.temperature = s.temperature;
      o.top_k = s.top_k;
      o.top_p = s.top_p;
      o.seed = s.seed;
      for (decode::Hypothesis& h : decode::sample(decoder, ids, o)) out.push_back({std::move(h)});
      return out;
    }
  }
  return out;
}

}  // namespace

void validate(const GenerateSettings& s) {
  ATTN_CHECK(s.max_tokens >= 1 && s.max_tokens <= kMaxOutputTokens, kGenerate, "--max-tokens must be in [1, ",
             kMaxOutputTokens, "], got ", s.max_tokens);
  switch (s.mode) {
    case GenerateSettings::Mode::Greedy: break;
    case GenerateSettings::Mode::Beam:
      ATTN_CHECK(s.beam >= 1 && s.beam <= decode::kMaxBeam, kGenerate, "--beam must be in [1, ", decode::kMaxBeam,
                 "], got ", s.beam);
      ATTN_CHECK(s.n_best >= 1 && s.n_best <= s.beam, kGenerate, "--n-best must be in [1, --beam] = [1, ", s.beam,
                 "], got ", s.n_best);
      ATTN_CHECK(std::isfinite(s.alpha) && s.alpha >= 0, kGenerate, "--alpha must be finite and >= 0, got ", s.alpha);
      break;
    case GenerateSettings::Mode::Sample:
      ATTN_CHECK(std::isfinite(s.temperature) && s.temperature > 0, kGenerate,
                 "--temperature must be > 0 (for the most probable token use --greedy), got ", s.temperature);
      ATTN_CHECK(s.top_k >= 0, kGenerate, "--top-k must be >= 0 (0: no top-k filter), got ", s.top_k);
      ATTN_CHECK(s.top_p > 0 && s.top_p <= 1, kGenerate, "--top-p must be in (0, 1] (1: no nucleus filter), got ",
                 s.top_p);
      break;
  }
  if (s.speculative.enabled()) {
    validate(s.speculative);
    ATTN_CHECK(s.mode != GenerateSettings::Mode::Beam, kGenerate,
               s.speculative.lookup ? "--prompt-lookup" : "--draft", " works with greedy decoding and sampling, not --beam");
  }
}

std::vector<std::vector<decode::Hypothesis>> generate_batch(const ModelFolder& folder,
                                                            const std::vector<std::vector<int64_t>>& prompts,
                                                            const GenerateSettings& settings, int64_t first) {
  validate(settings);
  auto model = std::dynamic_pointer_cast<models::DecoderOnlyModel>(folder.base);
  ATTN_CHECK(model != nullptr, kGenerate, "the model in '", folder.dir, "' is not decoder_only");
  const models::ModelConfig& c = model->config();
  ATTN_CHECK(!prompts.empty(), kGenerate, "no prompts");
  const ModelFolder* draft = settings.speculative.draft;
  if (settings.speculative.enabled())
    for (const ModelFolder* f : {&folder, draft})
      ATTN_CHECK(f == nullptr || f->base->config().sliding_window == 0, kGenerate, "the model in '",
                 f == nullptr ? "" : f->dir, "' has a sliding window, whose cache cannot take rejected draft "
                 "tokens back: speculative decoding does not support it");
  if (draft != nullptr) {
    check_draft(folder, *draft, kGenerate);
    ATTN_CHECK(std::dynamic_pointer_cast<models::DecoderOnlyModel>(draft->base) != nullptr, kGenerate,
               "the draft model in '", draft->dir, "' is not decoder_only");
  }
  NoGradGuard no_grad;
  // Every prompt's row and length limit; rows that share a limit (and, without a PAD id to pad
  // with, a length) are decoded together, in input order.
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> groups;
  std::vector<std::vector<int64_t>> rows(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t number = first + static_cast<int64_t>(i);  // in the caller's whole input
    ATTN_CHECK(!prompts[i].empty(), kGenerate, "prompt ", number, " is empty");
    for (int64_t id : prompts[i])
      ATTN_CHECK(id >= 0 && id < c.vocab_size() && id != folder.pad, kGenerate, "prompt ", number, " holds id ", id,
                 id == folder.pad ? ", the padding token" : ", outside the vocabulary", " (", c.vocab_size(), " ids)");
    if (settings.prepend_bos) rows[i].push_back(folder.bos);
    rows[i].insert(rows[i].end(), prompts[i].begin(), prompts[i].end());
    const int64_t n = static_cast<int64_t>(rows[i].size());
    int64_t limit = settings.max_tokens;
    if (learned_positions(c)) {
      ATTN_CHECK(n <= c.max_len, kGenerate, "prompt ", number, " has ", n - (settings.prepend_bos ? 1 : 0),
                 " tokens", settings.prepend_bos ? str_cat("; with <bos> that is ", n, " positions") : std::string(),
                 ", more than the ", c.max_len, " learned positions of the model (max_len)");
      // The last generated token is never fed back, so n + limit - 1 positions suffice.
      limit = std::min(limit, c.max_len - n + 1);
    }
    if (draft != nullptr && learned_positions(draft->base->config())) {
      // The draft reads the same positions; it must have as many as this generation uses.
      const int64_t dmax = draft->base->config().max_len;
      ATTN_CHECK(n + limit - 1 <= dmax, kGenerate, "prompt ", i + 1, " needs ", n + limit - 1,
                 " positions, more than the ", dmax, " learned positions of the draft model '", draft->dir,
                 "' (max_len): use --max-tokens ", std::max<int64_t>(1, dmax - n + 1), " or a draft with more");
    }
    groups[{limit, folder.pad < 0 ? n : 0}].push_back(i);
  }
  std::vector<std::vector<decode::Hypothesis>> out(prompts.size());
  for (const auto& [key, members] : groups) {
    std::vector<std::vector<int64_t>> batch;
    for (size_t i : members) batch.push_back(rows[i]);
    auto found = search(*model, folder, batch, settings, key.first);
    for (size_t k = 0; k < members.size(); ++k) out[members[k]] = std::move(found[k]);
  }
  return out;
}

}  // namespace attn::run
