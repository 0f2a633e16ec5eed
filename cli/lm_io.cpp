// Generation and fill-mask for the single-stack models (see lm_io.h). Generation hands
// <bos> + prompt to decode::LmDecoder (KV cache, left-aligned prompts) and lets the existing
// greedy, beam and sampling searches drive it; fill-mask is one encoder pass and a softmax at the
// masked positions. Everything runs with the model in eval mode under NoGradGuard.
// Deliberately no truncation of prompts: too long is an error, never a silent cut.
#include "lm_io.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "attn/autograd/tape.h"
#include "attn/core/error.h"
#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/decode/lm_decoder.h"
#include "attn/decode/sampler.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_only.h"
#include "attn/ops/ops.h"

namespace attn::cli {

namespace {

constexpr const char* kGenerate = "generate";

bool learned_positions(const models::ModelConfig& c) { return c.positional == nn::PositionalKind::Learned; }

// One search over a batch of rows <bos> + prompt, all with the same length limit.
std::vector<std::vector<decode::Hypothesis>> search(models::DecoderOnlyModel& model, const ModelFolder& folder,
                                                    const std::vector<std::vector<int64_t>>& rows,
                                                    const GenerateSettings& s, int64_t max_len) {
  const Tensor ids = pad_batch(rows, folder.pad);  // [B, S]
  decode::LmDecoder decoder(model);
  std::vector<std::vector<decode::Hypothesis>> out;
  switch (s.mode) {
    case GenerateSettings::Mode::Greedy: {
      decode::GreedyOptions o;
      o.bos = folder.bos;
      o.eos = folder.eos;
      o.pad = folder.pad;
      o.max_len = max_len;
      for (decode::Hypothesis& h : decode::greedy_search(decoder, ids, o)) out.push_back({std::move(h)});
      return out;
    }
    case GenerateSettings::Mode::Beam: {
      decode::BeamOptions o;
      o.beam = s.beam;
      o.alpha = s.alpha;
      o.n_best = s.n_best;
      o.bos = folder.bos;
      o.eos = folder.eos;
      o.pad = folder.pad;
      o.max_len = max_len;
      return decode::beam_search(decoder, ids, o);
    }
    case GenerateSettings::Mode::Sample: {
      decode::SamplingOptions o;
      o.temperature = s.temperature;
      o.top_k = s.top_k;
      o.top_p = s.top_p;
      o.seed = s.seed;
      o.bos = folder.bos;
      o.eos = folder.eos;
      o.pad = folder.pad;
      o.max_len = max_len;
      for (decode::Hypothesis& h : decode::sample(decoder, ids, o)) out.push_back({std::move(h)});
      return out;
    }
  }
  return out;
}

}  // namespace

void validate(const GenerateSettings& s) {
  ATTN_CHECK(s.max_tokens >= 1, kGenerate, "--max-tokens must be >= 1, got ", s.max_tokens);
  switch (s.mode) {
    case GenerateSettings::Mode::Greedy: break;
    case GenerateSettings::Mode::Beam:
      ATTN_CHECK(s.beam >= 1, kGenerate, "--beam must be >= 1, got ", s.beam);
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
}

std::vector<std::vector<decode::Hypothesis>> generate_batch(const ModelFolder& folder,
                                                            const std::vector<std::vector<int64_t>>& prompts,
                                                            const GenerateSettings& settings) {
  validate(settings);
  auto model = std::dynamic_pointer_cast<models::DecoderOnlyModel>(folder.base);
  ATTN_CHECK(model != nullptr, kGenerate, "the model in '", folder.dir, "' is not decoder_only");
  const models::ModelConfig& c = model->config();
  ATTN_CHECK(!prompts.empty(), kGenerate, "no prompts");
  NoGradGuard no_grad;
  // Every prompt's row and length limit; rows that share a limit (and, without a PAD id to pad
  // with, a length) are decoded together, in input order.
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> groups;
  std::vector<std::vector<int64_t>> rows(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    ATTN_CHECK(!prompts[i].empty(), kGenerate, "prompt ", i + 1, " is empty");
    for (int64_t id : prompts[i])
      ATTN_CHECK(id >= 0 && id < c.vocab_size() && id != folder.pad, kGenerate, "prompt ", i + 1, " holds id ", id,
                 id == folder.pad ? ", the padding token" : ", outside the vocabulary", " (", c.vocab_size(), " ids)");
    if (settings.prepend_bos) rows[i].push_back(folder.bos);
    rows[i].insert(rows[i].end(), prompts[i].begin(), prompts[i].end());
    const int64_t n = static_cast<int64_t>(rows[i].size());
    int64_t limit = settings.max_tokens;
    if (learned_positions(c)) {
      ATTN_CHECK(n <= c.max_len, kGenerate, "prompt ", i + 1, " has ", n - (settings.prepend_bos ? 1 : 0),
                 " tokens", settings.prepend_bos ? str_cat("; with <bos> that is ", n, " positions") : std::string(),
                 ", more than the ", c.max_len, " learned positions of the model (max_len)");
      // The last generated token is never fed back, so n + limit - 1 positions suffice.
      limit = std::min(limit, c.max_len - n + 1);
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

std::vector<int64_t> read_masked_text(const std::string& text, const train::Vocab& vocab, const std::string& command,
                                      const std::string& where) {
  const char* cmd = command.c_str();
  ATTN_CHECK(vocab.has_mask(), cmd, "the vocabulary has no ", train::Vocab::kMaskToken,
             " token (it was not made for a masked-LM model)");
  TokenCodec codec;
  codec.vocab = &vocab;
  codec.pad = train::Vocab::kPad;
  codec.command = command;
  codec.source = where;
  std::vector<int64_t> ids;
  int64_t masks = 0;
  size_t pos = 0;
  const std::string marker = kMaskMarker;
  if (vocab.sentencepiece()) {
    // The model holds [MASK] as a user-defined piece, so the whole text encodes in one go
    // (pieces encoded apart would each gain SentencePiece's word-initial "▁").
    if (!split_tokens(text, vocab).empty()) ids = codec.read(text, 0, "text");
    // "the [MASK] sat" encodes as "▁the" "▁" "[MASK]" "▁sat": the lone word start before a mask
    // is dropped, since the filled piece carries its own "▁" when it starts a word.
    const int64_t space = vocab.id("\xE2\x96\x81", true);
    for (size_t i = ids.size(); i-- > 1;)
      if (ids[i] == vocab.mask_id() && ids[i - 1] == space && space != train::Vocab::kUnk)
        ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(i - 1));
    masks = std::count(ids.begin(), ids.end(), vocab.mask_id());
  }
  for (; !vocab.sentencepiece();) {
    const size_t hit = text.find(marker, pos);
    const std::string piece = text.substr(pos, hit == std::string::npos ? std::string::npos : hit - pos);
    // A piece may be empty ("[MASK]c") or only spaces; read() refuses empty input, so only
    // pieces with tokens go through it.
    if (!split_tokens(piece, vocab).empty()) {
      const std::vector<int64_t> part = codec.read(piece, 0, "text");
      ids.insert(ids.end(), part.begin(), part.end());
    }
    if (hit == std::string::npos) break;
    ids.push_back(vocab.mask_id());
    ++masks;
    pos = hit + marker.size();
  }
  ATTN_CHECK(!ids.empty(), cmd, where, ": the text is empty");
  ATTN_CHECK(masks > 0, cmd, where, ": the text has no ", kMaskMarker, " to fill");
  return ids;
}

std::vector<std::vector<MaskPrediction>> fill_masks(const ModelFolder& folder,
                                                    const std::vector<std::vector<int64_t>>& sequences,
                                                    int64_t top_k) {
  const char* op = "fill-mask";
  ATTN_CHECK(top_k >= 1, op, "--top-k must be >= 1, got ", top_k);
  auto model = std::dynamic_pointer_cast<models::EncoderOnlyModel>(folder.base);
  ATTN_CHECK(model != nullptr, op, "the model in '", folder.dir, "' is not encoder_only");
  ATTN_CHECK(folder.vocab && folder.vocab->has_mask(), op, "the model folder '", folder.dir,
             "' has no vocabulary with a ", train::Vocab::kMaskToken, " token");
  ATTN_CHECK(!sequences.empty(), op, "no texts");
  const models::ModelConfig& c = model->config();
  const int64_t mask = folder.vocab->mask_id();
  const int64_t first = folder.vocab->num_special();
  for (size_t i = 0; i < sequences.size(); ++i)
    if (learned_positions(c))
      ATTN_CHECK(static_cast<int64_t>(sequences[i].size()) <= c.max_len, op, "text ", i + 1, " has ",
                 sequences[i].size(), " tokens, more than the ", c.max_len, " learned positions of the model (max_len)");
  NoGradGuard no_grad;
  const Tensor ids = pad_batch(sequences, folder.pad);          // [B, S]
  const Tensor probs = softmax(model->forward(ids));            // [B, S, V]
  const int64_t S = probs.size(1), V = probs.size(2);
  const std::vector<double> p = probs.to_vector<double>();
  std::vector<std::vector<MaskPrediction>> out(sequences.size());
  for (size_t b = 0; b < sequences.size(); ++b) {
    for (size_t t = 0; t < sequences[b].size(); ++t) {
      if (sequences[b][t] != mask) continue;
      const double* row = p.data() + (static_cast<int64_t>(b) * S + static_cast<int64_t>(t)) * V;
      std::vector<int64_t> order;
      for (int64_t v = first; v < V; ++v) order.push_back(v);
      const size_t k = static_cast<size_t>(std::min<int64_t>(top_k, static_cast<int64_t>(order.size())));
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                        [&](int64_t a, int64_t z) { return row[a] > row[z] || (row[a] == row[z] && a < z); });
      MaskPrediction m;
      m.position = static_cast<int64_t>(t);
      for (size_t j = 0; j < k; ++j) m.candidates.emplace_back(order[j], row[order[j]]);
      out[b].push_back(std::move(m));
    }
  }
  return out;
}

}  // namespace attn::cli
