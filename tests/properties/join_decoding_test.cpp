// Property: continuous batching keeps every row's own computation. Rows that join a running
// batch of cached decoding (TransformerDecoder::join, LmDecoder::join, nn::KVCache::append_rows)
// at different steps, next to rows of other lengths, and rows that leave it (reorder, then
// trim_padding), give at every one of their steps the next-token log-probabilities that the
// same source or prompt gives decoded alone: within 1e-10 in float64 and 1e-5 in float32, for
// each positional kind, post- and pre-norm. Control: the same comparison one step off fails, so
// the check sees positions.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "attn/core/autograd.h"
#include "attn/decode/lm_decoder.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "property_util.h"

namespace attn {
namespace {

struct Variant {
  DType dtype;
  bool norm_first;
  nn::PositionalKind positional;
};

std::string name_of(const Variant& v) {
  return str_cat(dtype_name(v.dtype), v.norm_first ? " pre-norm " : " post-norm ", static_cast<int>(v.positional));
}

template <class M>
void randomize(M& model, uint64_t seed) {
  Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    const double sd = name.find("embedding") != std::string::npos ? 0.5 : 1.0 / std::sqrt(static_cast<double>(p.size(-1)));
    p.copy_from(Tensor::randn(p.shape(), rng, p.dtype(), 0.0, sd));
  }
  model.eval();
}

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (DType d : {DType::F64, DType::F32})
    for (bool nf : {false, true})
      for (nn::PositionalKind p : {nn::PositionalKind::Sinusoidal, nn::PositionalKind::Learned, nn::PositionalKind::Rope})
        out.push_back({d, nf, p});
  return out;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return a.size() == b.size() ? m : INFINITY;
}

// Each source's fed tokens (BOS first) and the step at which it joins the running batch; the
// first source leaves after kLeave steps of its own.
const std::vector<std::vector<int64_t>> kFeeds = {{1, 5, 9, 4, 11, 3, 7, 8}, {1, 8, 3, 12, 5}, {1, 6, 6, 10, 4, 9}};
const std::vector<int64_t> kJoinAt = {0, 2, 3};
constexpr int64_t kLeave = 4;

// Runs the schedule: at global step g, sources with kJoinAt == g join (through `join`), then every
// live row is stepped with its next fed token; source 0 leaves after kLeave of its steps. Returns
// each source's log-probability rows, one per own step.
template <class D, class Join>
std::vector<std::vector<std::vector<double>>> run_schedule(D& decoder, Join join, int64_t* trimmed) {
  const size_t n = kFeeds.size();
  std::vector<std::vector<std::vector<double>>> out(n);
  std::vector<size_t> live;  // source of each decoder row
  std::vector<size_t> fed(n, 0);
  for (int64_t g = 0;; ++g) {
    for (size_t s = 0; s < n; ++s)
      if (kJoinAt[s] == g) {
        join(s);
        live.push_back(s);
      }
    if (live.empty()) break;
    std::vector<int64_t> tokens;
    for (size_t s : live) tokens.push_back(kFeeds[s][fed[s]]);
    const Tensor lp = decoder.step(Tensor::from_vector<int64_t>(tokens, {static_cast<int64_t>(tokens.size())}));
    const int64_t v = lp.size(1);
    const auto values = lp.template to_vector<double>();
    std::vector<int64_t> keep;
    std::vector<size_t> next;
    for (size_t r = 0; r < live.size(); ++r) {
      const size_t s = live[r];
      out[s].emplace_back(values.begin() + static_cast<int64_t>(r) * v, values.begin() + static_cast<int64_t>(r + 1) * v);
      ++fed[s];
      const size_t stop = s == 0 ? static_cast<size_t>(kLeave) : kFeeds[s].size();
      if (fed[s] < stop) {
        keep.push_back(static_cast<int64_t>(r));
        next.push_back(s);
      }
    }
    if (keep.size() != live.size()) {
      decoder.reorder(keep);
      *trimmed += decoder.trim_padding();
    }
    live = std::move(next);
    if (live.empty() && g >= kJoinAt.back()) break;
  }
  return out;
}

void expect_matches_solo(const std::vector<std::vector<std::vector<double>>>& joined,
                         const std::vector<std::vector<std::vector<double>>>& solo, double tol, const std::string& what) {
  for (size_t s = 0; s < solo.size(); ++s) {
    ASSERT_EQ(joined[s].size(), solo[s].size()) << what << " source " << s;
    for (size_t t = 0; t < solo[s].size(); ++t) {
      EXPECT_LE(max_diff(joined[s][t], solo[s][t]), tol) << what << " source " << s << " step " << t;
    }
    // Control: one step off differs clearly (the comparison sees positions and tokens).
    if (solo[s].size() >= 2) {
      EXPECT_GT(max_diff(joined[s][1], solo[s][0]), 1e3 * tol) << what << " control";
    }
  }
}

TEST(JoinDecoding, EncoderDecoderRowsJoiningLaterMatchTheirSoloDecoding) {
  const std::vector<std::vector<int64_t>> sources = {{5, 6, 7, 8, 9}, {10, 4}, {3, 12, 11, 6, 7, 9, 4}};
  for (const Variant& var : variants()) {
    models::ModelConfig c = props::small_config(models::Arch::EncoderDecoder, var.dtype, var.norm_first);
    c.positional = var.positional;
    models::EncoderDecoderModel model(c);
    randomize(model, 11);
    NoGradGuard no_grad;
    std::vector<std::vector<std::vector<double>>> solo(sources.size());
    for (size_t s = 0; s < sources.size(); ++s) {
      decode::TransformerDecoder alone(model);
      alone.start(props::ids(sources[s], 1, static_cast<int64_t>(sources[s].size())));
      const size_t steps = s == 0 ? static_cast<size_t>(kLeave) : kFeeds[s].size();
      for (size_t t = 0; t < steps; ++t)
        solo[s].push_back(alone.step(Tensor::from_vector<int64_t>({kFeeds[s][t]}, {1})).to_vector<double>());
    }
    decode::TransformerDecoder batch(model);
    int64_t trimmed = 0;
    const auto joined = run_schedule(batch, [&](size_t s) {
      batch.join(props::ids(sources[s], 1, static_cast<int64_t>(sources[s].size())));
    }, &trimmed);
    expect_matches_solo(joined, solo, var.dtype == DType::F64 ? 1e-10 : 1e-5, "encoder-decoder " + name_of(var));
    EXPECT_GT(trimmed, 0) << "the first source's positions are dropped once it leaves";
  }
}

TEST(JoinDecoding, DecoderOnlyRowsJoiningLaterMatchTheirSoloDecoding) {
  // Prompts (BOS first); a row's prefix is its prompt without the last token, which it feeds at
  // its first step, then the fed tokens after BOS.
  const std::vector<std::vector<int64_t>> prompts = {{1, 5, 6, 7}, {1}, {1, 3, 12, 11, 6, 7}};
  for (const Variant& var : variants()) {
    models::ModelConfig c = props::small_config(models::Arch::DecoderOnly, var.dtype, var.norm_first);
    c.positional = var.positional;
    models::DecoderOnlyModel model(c);
    randomize(model, 13);
    NoGradGuard no_grad;
    // What each row feeds: the prompt's last token, then kFeeds' tokens after BOS.
    std::vector<std::vector<int64_t>> feeds(prompts.size());
    for (size_t s = 0; s < prompts.size(); ++s) {
      feeds[s].push_back(prompts[s].back());
      feeds[s].insert(feeds[s].end(), kFeeds[s].begin() + 1, kFeeds[s].end());
    }
    std::vector<std::vector<std::vector<double>>> solo(prompts.size());
    for (size_t s = 0; s < prompts.size(); ++s) {
      decode::LmDecoder alone(model);
      alone.start(std::vector<std::vector<int64_t>>{prompts[s]});
      solo[s].push_back(alone.step(Tensor::from_vector<int64_t>({0}, {1})).to_vector<double>());  // after the prompt
      const size_t steps = s == 0 ? static_cast<size_t>(kLeave) : kFeeds[s].size();
      for (size_t t = 1; t < steps; ++t)
        solo[s].push_back(alone.step(Tensor::from_vector<int64_t>({feeds[s][t]}, {1})).to_vector<double>());
    }
    decode::LmDecoder batch(model);
    int64_t trimmed = 0;
    // run_schedule feeds kFeeds[s][t]; map its BOS to the prompt's last token.
    struct Adapter {
      decode::LmDecoder& d;
      const std::vector<std::vector<int64_t>>& prompts;
      std::vector<size_t>* order;
      Tensor step(const Tensor& tokens) {
        auto t = tokens.to_vector<int64_t>();
        for (size_t r = 0; r < t.size(); ++r)
          if (t[r] == props::kBos) t[r] = prompts[(*order)[r]].back();
        return d.step(Tensor::from_vector<int64_t>(t, {static_cast<int64_t>(t.size())}));
      }
      void reorder(const std::vector<int64_t>& rows) {
        std::vector<size_t> next;
        for (int64_t r : rows) next.push_back((*order)[static_cast<size_t>(r)]);
        *order = std::move(next);
        d.reorder(rows);
      }
      int64_t trim_padding() { return d.trim_padding(); }
    };
    std::vector<size_t> order;
    Adapter adapter{batch, prompts, &order};
    const auto joined = run_schedule(adapter, [&](size_t s) {
      batch.join(std::vector<int64_t>(prompts[s].begin(), prompts[s].end() - 1));
      order.push_back(s);
    }, &trimmed);
    expect_matches_solo(joined, solo, var.dtype == DType::F64 ? 1e-10 : 1e-5, "decoder-only " + name_of(var));
    EXPECT_GT(trimmed, 0) << "the first prompt's positions are dropped once it leaves";
  }
}

}  // namespace
}  // namespace attn
