// run/fill_mask.cpp — see attn/run/fill_mask.h: one encoder pass and a softmax at the
// masked positions, the model in eval mode under NoGradGuard.
#include "attn/run/fill_mask.h"

#include <algorithm>
#include <cstdio>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/models/encoder_only.h"
#include "attn/ops/ops.h"
#include "attn/run/token_codec.h"

namespace attn::run {

namespace {

bool learned_positions(const models::ModelConfig& c) { return c.positional == nn::PositionalKind::Learned; }

}  // namespace

std::vector<int64_t> read_masked_text(const std::string& text, const io::Vocab& vocab, const std::string& command,
                                      const std::string& where) {
  const char* cmd = command.c_str();
  ATTN_CHECK(vocab.has_mask(), cmd, "the vocabulary has no ", io::Vocab::kMaskToken,
             " token (it was not made for a masked-LM model)");
  // The whole text first: the pieces between the masks are read one by one below, so an
  // error found inside one would give an offset into that piece, not into the line.
  const int64_t bad = io::utf8_error_offset(text);
  if (bad >= 0) {
    // What comes before the bad byte (valid UTF-8), its last 40 bytes at most from a character start.
    size_t from = bad > 40 ? static_cast<size_t>(bad) - 40 : 0;
    while (from < static_cast<size_t>(bad) && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
    char value[8];
    std::snprintf(value, sizeof value, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(text[bad])));
    fail(cmd, where, ": invalid UTF-8 at byte ", bad + 1, " of the text (byte value ", value, ", after \"",
         from > 0 ? "..." : "", text.substr(from, static_cast<size_t>(bad) - from), "\")");
  }
  TokenCodec codec;
  codec.vocab = &vocab;
  codec.pad = io::Vocab::kPad;
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
      if (ids[i] == vocab.mask_id() && ids[i - 1] == space && space != io::Vocab::kUnk)
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
             "' has no vocabulary with a ", io::Vocab::kMaskToken, " token");
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

}  // namespace attn::run
