// Fine-tuning data and losses (see finetune.h): pairs files (TSV or JSONL) read with errors
// naming the line, the prompt template, SFT rows whose prompt positions are masked out of the
// loss, per-sequence log-probabilities and the DPO loss, built from existing differentiable ops
// (cross_entropy, concat, scale), so that their gradients are those ops' gradients.
// Not here: the objectives (objective.cpp) or where the data comes from (trainer.cpp).
#include "attn/train/finetune.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/lines.h"
#include "attn/io/vocab.h"
#include "attn/ops/ops.h"

namespace attn::train {

namespace {

constexpr const char* kOp = "pairs";
constexpr const char* kPromptSlot = "{prompt}";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == '\t') out.emplace_back();
    else out.back() += c;
  }
  return out;
}

}  // namespace

const char* objective_kind_name(ObjectiveKind kind) {
  switch (kind) {
    case ObjectiveKind::Pretrain: return "pretrain";
    case ObjectiveKind::Sft: return "sft";
    case ObjectiveKind::Dpo: return "dpo";
  }
  return "?";
}

ObjectiveKind parse_objective_kind(const std::string& name) {
  if (name == "pretrain") return ObjectiveKind::Pretrain;
  if (name == "sft") return ObjectiveKind::Sft;
  if (name == "dpo") return ObjectiveKind::Dpo;
  fail("objective", "unknown objective '", name, "' (pretrain, sft or dpo)");
}

// ---- pairs files ----------------------------------------------------------------------------

PairsFile read_pairs(const std::string& path, ObjectiveKind kind) {
  ATTN_CHECK(kind == ObjectiveKind::Sft || kind == ObjectiveKind::Dpo, kOp, "pairs files are for sft or dpo, not ",
             objective_kind_name(kind));
  const bool dpo = kind == ObjectiveKind::Dpo;
  const bool jsonl = ends_with(path, ".jsonl") || ends_with(path, ".json");
  const std::vector<std::string> fields =
      dpo ? std::vector<std::string>{"prompt", "chosen", "rejected"} : std::vector<std::string>{"prompt", "response"};
  const std::string text = io::read_file(path);
  PairsFile f;
  f.path = path;
  for (const io::NumberedLine& numbered : io::split_lines(text)) {
    const std::string line(numbered.text);
    const int64_t n = numbered.number;
    if (line.empty()) continue;
    const int64_t bad = io::utf8_error_offset(line);
    ATTN_CHECK(bad < 0, kOp, "'", path, "' line ", n, ": invalid UTF-8 at byte ", bad + 1, " of the line");
    std::vector<std::string> values;
    if (jsonl) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        fail(kOp, "'", path, "' line ", n, ": not valid JSON: ", e.what());
      }
      ATTN_CHECK(j.is_object(), kOp, "'", path, "' line ", n, ": expected a JSON object, got ", j.type_name());
      for (const std::string& key : fields) {
        ATTN_CHECK(j.contains(key), kOp, "'", path, "' line ", n, ": missing field \"", key, "\"");
        ATTN_CHECK(j[key].is_string(), kOp, "'", path, "' line ", n, ": field \"", key, "\" must be a string, got ",
                   j[key].type_name());
        values.push_back(j[key].get<std::string>());
      }
    } else {
      values = split_tabs(line);
      std::string layout;
      for (const std::string& key : fields) layout += (layout.empty() ? "" : "<TAB>") + key;
      ATTN_CHECK(values.size() == fields.size(), kOp, "'", path, "' line ", n, ": expected ", fields.size(),
                 " tab-separated fields (", layout, "), got ", values.size());
    }
    for (size_t k = 1; k < fields.size(); ++k)
      ATTN_CHECK(!values[k].empty(), kOp, "'", path, "' line ", n, ": the ", fields[k], " is empty");
    PairRecord r;
    r.prompt = values[0];
    r.response = values[1];
    if (dpo) r.rejected = values[2];
    r.line = n;
    f.records.push_back(std::move(r));
  }
  ATTN_CHECK(!f.records.empty(), kOp, "'", path, "' holds no ", dpo ? "preference triples" : "prompt/response pairs");
  return f;
}

void validate_template(const std::string& tmpl) {
  const size_t at = tmpl.find(kPromptSlot);
  ATTN_CHECK(at != std::string::npos, "template", "the template '", tmpl, "' has no ", kPromptSlot);
  ATTN_CHECK(tmpl.find(kPromptSlot, at + 1) == std::string::npos, "template", "the template '", tmpl, "' has ",
             kPromptSlot, " more than once");
}

std::string apply_template(const std::string& tmpl, const std::string& prompt) {
  validate_template(tmpl);
  std::string out = tmpl;
  out.replace(out.find(kPromptSlot), std::string(kPromptSlot).size(), prompt);
  return out;
}

std::string unescape_template(const std::string& typed) {
  std::string out;
  for (size_t i = 0; i < typed.size(); ++i) {
    if (typed[i] != '\\') {
      out += typed[i];
      continue;
    }
    ATTN_CHECK(i + 1 < typed.size(), "template", "the template '", typed, "' ends in a lone backslash");
    const char c = typed[++i];
    if (c == 'n') out += '\n';
    else if (c == 't') out += '\t';
    else if (c == '\\') out += '\\';
    else fail("template", "the template '", typed, "' has an unknown escape \\", std::string(1, c), " (\\n, \\t, \\\\)");
  }
  return out;
}

PairExamples encode_pairs(const PairsFile& file, const std::string& tmpl, bool templated, const TextEncoder& encode) {
  PairExamples out;
  for (const PairRecord& r : file.records) {
    io::Example e;
    e.src = encode(templated ? apply_template(tmpl, r.prompt) : r.prompt);
    e.tgt = encode(r.response);
    ATTN_CHECK(!e.tgt.empty(), kOp, "'", file.path, "' line ", r.line, ": the response encodes to no tokens");
    if (!r.rejected.empty()) {
      std::vector<int64_t> rejected = encode(r.rejected);
      ATTN_CHECK(!rejected.empty(), kOp, "'", file.path, "' line ", r.line, ": the rejected response encodes to no tokens");
      out.rejected.push_back(std::move(rejected));
    }
    out.examples.push_back(std::move(e));
  }
  return out;
}

// ---- batches and losses -----------------------------------------------------------------------

Batch make_sft_batch(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices, SpecialIds ids,
                     const std::vector<std::vector<int64_t>>* responses) {
  ATTN_CHECK(!indices.empty(), "make_sft_batch", "no examples");
  ATTN_CHECK(!responses || responses->size() == dataset.size(), "make_sft_batch", "responses for ",
             responses ? responses->size() : 0, " examples, the dataset has ", dataset.size());
  const int64_t B = static_cast<int64_t>(indices.size());
  const int64_t lead = ids.bos >= 0 ? 1 : 0;  // GPT-2 reads its text without a <bos> in front
  int64_t T = 0;
  for (int64_t k : indices) {
    ATTN_CHECK(k >= 0 && k < static_cast<int64_t>(dataset.size()), "make_sft_batch", "index ", k, " out of range [0, ",
               dataset.size(), ")");
    const auto& e = dataset[static_cast<size_t>(k)];
    const auto& resp = responses ? (*responses)[static_cast<size_t>(k)] : e.tgt;
    ATTN_CHECK(!resp.empty(), "make_sft_batch", "example ", k, " has an empty response");
    ATTN_CHECK(lead + static_cast<int64_t>(e.src.size()) >= 1, "make_sft_batch", "example ", k,
               " has an empty prompt and the model no <bos>: nothing predicts its first response token");
    T = std::max<int64_t>(T, lead + static_cast<int64_t>(e.src.size() + resp.size()));
  }
  const int64_t fill = ids.pad >= 0 ? ids.pad : ids.eos;
  Batch b;
  b.tgt_in = Tensor::full({B, T}, static_cast<double>(fill), DType::I64);
  b.tgt_out = Tensor::full({B, T}, static_cast<double>(kIgnoreTarget), DType::I64);
  int64_t* in = b.tgt_in.data<int64_t>();
  int64_t* out = b.tgt_out.data<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    const auto& e = dataset[static_cast<size_t>(indices[static_cast<size_t>(r)])];
    const auto& resp = responses ? (*responses)[static_cast<size_t>(indices[static_cast<size_t>(r)])] : e.tgt;
    int64_t* row_in = in + r * T;
    int64_t* row_out = out + r * T;
    // Input: [<bos>] prompt response; position j predicts input j + 1 (the last, <eos>), and
    // only the positions that predict a response token or <eos> count.
    const int64_t P = static_cast<int64_t>(e.src.size()), R = static_cast<int64_t>(resp.size());
    if (lead) row_in[0] = ids.bos;
    for (int64_t i = 0; i < P; ++i) row_in[lead + i] = e.src[static_cast<size_t>(i)];
    for (int64_t i = 0; i < R; ++i) {
      row_in[lead + P + i] = resp[static_cast<size_t>(i)];
      row_out[lead + P + i - 1] = resp[static_cast<size_t>(i)];
    }
    row_out[lead + P + R - 1] = ids.eos;
    b.n_tgt_tokens += R + 1;
    b.tgt_lengths.push_back(P + R);
    b.src_lengths.push_back(0);
  }
  b.indices = indices;
  return b;
}

PackedSftBatch make_packed_sft_batch(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices,
                                     SpecialIds ids, int64_t block) {
  ATTN_CHECK(block >= 2, "make_packed_sft_batch", "block must be at least 2 tokens, got ", block);
  // Every pair's own row, as make_sft_batch builds it (one at a time: no padding).
  struct Piece {
    std::vector<int64_t> in, out;
  };
  std::vector<Piece> pieces;
  int64_t n_tgt_tokens = 0;
  for (int64_t k : indices) {
    const Batch one = make_sft_batch(dataset, {k}, ids);
    pieces.push_back({one.tgt_in.to_vector<int64_t>(), one.tgt_out.to_vector<int64_t>()});
    n_tgt_tokens += one.n_tgt_tokens;
  }
  ATTN_CHECK(!pieces.empty(), "make_packed_sft_batch", "no examples");
  // Rows: consecutive pieces while they fit in `block` tokens.
  std::vector<std::vector<size_t>> rows;
  int64_t used = 0, T = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    const int64_t L = static_cast<int64_t>(pieces[p].in.size());
    if (rows.empty() || used + L > block) {
      rows.emplace_back();
      used = 0;
    }
    rows.back().push_back(p);
    used += L;
    T = std::max(T, used);
  }
  const int64_t B = static_cast<int64_t>(rows.size());
  const int64_t fill = ids.pad >= 0 ? ids.pad : ids.eos;
  PackedSftBatch r;
  Batch& b = r.batch;
  b.tgt_in = Tensor::full({B, T}, static_cast<double>(fill), DType::I64);
  b.tgt_out = Tensor::full({B, T}, static_cast<double>(kIgnoreTarget), DType::I64);
  r.positions = Tensor::zeros({B, T}, DType::I64);
  r.segments = Tensor::full({B, T}, -1.0, DType::I64);
  int64_t* in = b.tgt_in.data<int64_t>();
  int64_t* out = b.tgt_out.data<int64_t>();
  int64_t* pos = r.positions.data<int64_t>();
  int64_t* seg = r.segments.data<int64_t>();
  for (int64_t row = 0; row < B; ++row) {
    int64_t at = row * T;
    int64_t s = 0;
    for (size_t p : rows[static_cast<size_t>(row)]) {
      const Piece& piece = pieces[p];
      for (size_t i = 0; i < piece.in.size(); ++i, ++at) {
        in[at] = piece.in[i];
        out[at] = piece.out[i];
        pos[at] = static_cast<int64_t>(i);
        seg[at] = s;
      }
      ++s;
    }
    b.tgt_lengths.push_back(at - row * T);
    b.src_lengths.push_back(0);
  }
  b.n_tgt_tokens = n_tgt_tokens;
  b.indices = indices;
  r.pairs = static_cast<int64_t>(pieces.size());
  return r;
}

Tensor sequence_logprobs(const Tensor& logits, const Tensor& targets, int64_t ignore) {
  ATTN_CHECK(logits.defined() && targets.defined() && logits.dim() == 3 && targets.dim() == 2 &&
                 logits.size(0) == targets.size(0) && logits.size(1) == targets.size(1),
             "sequence_logprobs", "expected logits [B, T, V] and targets [B, T], got ",
             logits.defined() ? logits.str() : "undefined", " and ", targets.defined() ? targets.str() : "undefined");
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  std::vector<Tensor> rows;
  for (int64_t b = 0; b < B; ++b) {
    int64_t counted = 0;
    for (int64_t i = 0; i < T; ++i) counted += t[static_cast<size_t>(b * T + i)] != ignore ? 1 : 0;
    // cross_entropy is the mean of -log p over the counted positions: times -counted, the sum
    // of log p (and 0, with no gradient, when none counts).
    const Tensor ce = cross_entropy(slice(logits, 0, b, b + 1).reshape({T, V}),
                                    slice(targets, 0, b, b + 1).reshape({T}), ignore, 0.0);
    rows.push_back(scale(ce, -static_cast<double>(counted)).reshape({1}));
  }
  return B == 1 ? rows.front() : concat(rows, 0);
}

Tensor dpo_loss(const Tensor& policy_chosen, const Tensor& policy_rejected, const Tensor& ref_chosen,
                const Tensor& ref_rejected, double beta) {
  ATTN_CHECK(policy_chosen.defined() && policy_chosen.dim() == 1 && policy_rejected.shape() == policy_chosen.shape() &&
                 ref_chosen.shape() == policy_chosen.shape() && ref_rejected.shape() == policy_chosen.shape(),
             "dpo_loss", "expected four [P] tensors");
  ATTN_CHECK(beta > 0 && std::isfinite(beta), "dpo_loss", "beta must be positive, got ", beta);
  const int64_t P = policy_chosen.size(0);
  const Tensor z = sub(sub(policy_chosen, ref_chosen.detach()), sub(policy_rejected, ref_rejected.detach()));  // [P]
  const Tensor pair_logits = concat({scale(z, beta).reshape({P, 1}), Tensor::zeros({P, 1}, z.dtype())}, 1);  // [P, 2]
  return cross_entropy(pair_logits, Tensor::zeros({P}, DType::I64), -100, 0.0);
}

PreferenceStats preference_stats(const std::vector<double>& policy_chosen, const std::vector<double>& policy_rejected,
                                 const std::vector<double>& ref_chosen, const std::vector<double>& ref_rejected,
                                 double beta) {
  const size_t P = policy_chosen.size();
  ATTN_CHECK(P > 0 && policy_rejected.size() == P && ref_chosen.size() == P && ref_rejected.size() == P,
             "preference_stats", "expected four lists of the same non-zero length");
  PreferenceStats s;
  s.pairs = static_cast<int64_t>(P);
  for (size_t k = 0; k < P; ++k) {
    const double rc = beta * (policy_chosen[k] - ref_chosen[k]);
    const double rr = beta * (policy_rejected[k] - ref_rejected[k]);
    const double m = rc - rr;
    // -log sigmoid(m) = log(1 + exp(-m)), written so that neither sign overflows.
    s.loss += m >= 0 ? std::log1p(std::exp(-m)) : -m + std::log1p(std::exp(m));
    s.accuracy += m > 0 ? 1.0 : m == 0 ? 0.5 : 0.0;
    s.margin += m;
    s.chosen_reward += rc;
    s.rejected_reward += rr;
  }
  const double n = static_cast<double>(P);
  s.loss /= n;
  s.accuracy /= n;
  s.margin /= n;
  s.chosen_reward /= n;
  s.rejected_reward /= n;
  return s;
}

}  // namespace attn::train
