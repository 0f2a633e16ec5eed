// The three training objectives (see objective.h) and their validation: teacher forcing with
// greedy-decoding accuracies for the encoder-decoder (paper §5), next-token prediction for the
// decoder-only model, BERT's masked LM for the encoder-only model. Validation runs in eval mode
// under NoGradGuard and restores the model's mode however it ends.
// Not here: the loop, the optimizer or checkpoints (trainer.cpp).
#include "attn/train/objective.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/decode/greedy.h"
#include "attn/decode/sequence_score.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/ops/ops.h"

namespace attn::train {

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Puts a model in eval mode for a scope and restores its mode afterwards, however it ends.
class EvalScope {
 public:
  explicit EvalScope(models::Model& model) : model_(model), was_training_(model.is_training()) { model_.eval(); }
  ~EvalScope() { model_.train(was_training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  models::Model& model_;
  bool was_training_;
};

// Rows of logits [N, V] whose argmax (the lower id on ties) equals their target, over the rows
// whose target is not `ignore`.
int64_t argmax_hits(const Tensor& logits, const Tensor& targets, int64_t ignore) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const std::vector<double> v = logits.to_vector<double>();
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  int64_t hits = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (t[static_cast<size_t>(n)] == ignore) continue;
    const double* row = v.data() + n * V;
    const int64_t best = std::max_element(row, row + V) - row;
    if (best == t[static_cast<size_t>(n)]) ++hits;
  }
  return hits;
}

void check_batch_size(int64_t batch_size) {
  ATTN_CHECK(batch_size >= 1, "validate", "batch_size must be at least 1, got ", batch_size);
}

}  // namespace

// ---- validation ---------------------------------------------------------------------------

ValidationResult validate_model(models::EncoderDecoderModel& model, const std::vector<io::Example>& examples,
                                int64_t batch_size, double label_smoothing, SpecialIds ids) {
  check_batch_size(batch_size);
  ValidationResult r;
  if (examples.empty()) return r;
  EvalScope eval(model);
  NoGradGuard no_grad;
  double loss_sum = 0, nll_sum = 0;
  decode::AccuracyCounts greedy;
  for (size_t begin = 0; begin < examples.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(examples.size(), begin + static_cast<size_t>(batch_size));
    const std::vector<io::Example> chunk(examples.begin() + static_cast<std::ptrdiff_t>(begin),
                                         examples.begin() + static_cast<std::ptrdiff_t>(end));
    const Batch b = make_batch(chunk, ids);
    // Teacher-forced loss, the training criterion and plain NLL, per non-PAD target.
    const Tensor logits = model.forward(b.src, b.tgt_in);  // [B, T, V]
    const int64_t rows = logits.size(0) * logits.size(1), V = logits.size(2);
    const Tensor flat = logits.reshape({rows, V});          // [B*T, V]
    const Tensor targets = b.tgt_out.reshape({rows});       // [B*T]
    const double n = static_cast<double>(b.n_tgt_tokens);
    loss_sum += cross_entropy(flat, targets, ids.pad, label_smoothing).item() * n;
    nll_sum += cross_entropy(flat, targets, ids.pad, 0.0).item() * n;
    r.tokens += b.n_tgt_tokens;

    // Greedy decoding, stopped after the longest reference + EOS (later tokens cannot count).
    std::vector<std::vector<int64_t>> references;
    for (const io::Example& e : chunk) references.push_back(e.tgt);
    decode::TransformerDecoder decoder(model);
    decode::GreedyOptions g;
    g.bos = ids.bos;
    g.eos = ids.eos;
    g.pad = ids.pad;
    g.max_len = decode::scoring_max_len(references);
    const std::vector<decode::Hypothesis> hyps = decode::greedy_search(decoder, b.src, g);
    for (size_t k = 0; k < chunk.size(); ++k) greedy.add(decode::score_sequence(references[k], hyps[k]));
  }
  r.loss = loss_sum / static_cast<double>(r.tokens);
  r.nll = nll_sum / static_cast<double>(r.tokens);
  r.sequences = greedy.sequences;
  r.token_acc = greedy.token_acc();
  r.exact_acc = greedy.exact_acc();
  return r;
}

ValidationResult validate_language_model(models::DecoderOnlyModel& model, const std::vector<io::Example>& examples,
                                         int64_t batch_size, double label_smoothing, SpecialIds ids) {
  check_batch_size(batch_size);
  ValidationResult r;
  r.exact_acc = kNaN;
  if (examples.empty()) return r;
  EvalScope eval(model);
  NoGradGuard no_grad;
  double loss_sum = 0, nll_sum = 0;
  int64_t hits = 0;
  for (size_t begin = 0; begin < examples.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(examples.size(), begin + static_cast<size_t>(batch_size));
    std::vector<int64_t> indices;
    for (size_t k = begin; k < end; ++k) indices.push_back(static_cast<int64_t>(k));
    const Batch b = make_lm_batch(examples, indices, ids);
    const Tensor logits = model.forward(b.tgt_in);            // [B, T, V]
    const int64_t rows = logits.size(0) * logits.size(1), V = logits.size(2);
    const Tensor flat = logits.reshape({rows, V});            // [B*T, V]
    const Tensor targets = b.tgt_out.reshape({rows});         // [B*T]
    const double n = static_cast<double>(b.n_tgt_tokens);
    loss_sum += cross_entropy(flat, targets, ids.pad, label_smoothing).item() * n;
    nll_sum += cross_entropy(flat, targets, ids.pad, 0.0).item() * n;
    hits += argmax_hits(flat, targets, ids.pad);
    r.tokens += b.n_tgt_tokens;
    r.sequences += b.size();
  }
  r.loss = loss_sum / static_cast<double>(r.tokens);
  r.nll = nll_sum / static_cast<double>(r.tokens);
  r.token_acc = static_cast<double>(hits) / static_cast<double>(r.tokens);
  return r;
}

ValidationResult validate_masked_lm(models::EncoderOnlyModel& model, const std::vector<io::Example>& examples,
                                    int64_t batch_size, double label_smoothing, const MaskingOptions& masking,
                                    uint64_t seed, int64_t pad) {
  check_batch_size(batch_size);
  ValidationResult r;
  r.exact_acc = kNaN;
  if (examples.empty()) return r;
  EvalScope eval(model);
  NoGradGuard no_grad;
  double loss_sum = 0, nll_sum = 0;
  int64_t hits = 0;
  for (size_t begin = 0; begin < examples.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(examples.size(), begin + static_cast<size_t>(batch_size));
    std::vector<int64_t> indices;
    for (size_t k = begin; k < end; ++k) indices.push_back(static_cast<int64_t>(k));
    const MaskedBatch b = make_masked_batch(examples, indices, masking, seed, -1, pad);
    if (b.n_chosen == 0) continue;
    const Tensor logits = model.forward(b.input);             // [B, S, V]
    const int64_t rows = logits.size(0) * logits.size(1), V = logits.size(2);
    const double n = static_cast<double>(b.n_chosen);
    loss_sum += masked_lm_loss(logits, b.labels, pad, label_smoothing).item() * n;
    nll_sum += masked_lm_loss(logits, b.labels, pad, 0.0).item() * n;
    hits += argmax_hits(logits.reshape({rows, V}), b.labels.reshape({rows}), pad);
    r.tokens += b.n_chosen;
    r.sequences += b.size();
  }
  if (r.tokens == 0) {
    r.loss = r.nll = r.token_acc = kNaN;
    return r;
  }
  r.loss = loss_sum / static_cast<double>(r.tokens);
  r.nll = nll_sum / static_cast<double>(r.tokens);
  r.token_acc = static_cast<double>(hits) / static_cast<double>(r.tokens);
  return r;
}

// ---- objectives ------------------------------------------------------------------------------

namespace {

// A mixture-of-experts model adds its load-balancing loss from the same forward (Switch
// Transformer): loss + moe_aux_loss_weight * aux_loss(). Dense models are unchanged.
BatchLoss with_moe_aux(const models::Model& model, BatchLoss b) {
  const double weight = model.config().moe_aux_loss_weight;
  const Tensor aux = model.aux_loss();
  if (aux.defined() && weight != 0.0) b.loss = add(b.loss, scale(aux, weight));
  return b;
}

// Next-token cross entropy of logits [B, T, V] against targets [B, T] (PAD ignored, label
// smoothing as configured), plus the MoE term: what the two teacher-forced objectives share.
BatchLoss next_token_loss(const models::Model& model, const Tensor& logits, const Tensor& targets,
                          int64_t tokens, const ObjectiveOptions& o) {
  const int64_t rows = logits.size(0) * logits.size(1), V = logits.size(2);
  return with_moe_aux(model, {cross_entropy(logits.reshape({rows, V}), targets.reshape({rows}), o.ids.pad,
                                            o.label_smoothing),
                              tokens});
}

// Paper §5: the decoder reads <bos> + target and predicts target + <eos>.
class Seq2SeqObjective : public Objective {
 public:
  Seq2SeqObjective(models::EncoderDecoderModel& model, const ObjectiveOptions& o) : model_(model), o_(o) {}

  BatchLoss loss(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices, int64_t) override {
    const Batch b = make_batch(dataset, indices, o_.ids);
    return next_token_loss(model_, model_.forward(b.src, b.tgt_in), b.tgt_out, b.n_tgt_tokens, o_);
  }
  ValidationResult validate(const std::vector<io::Example>& examples, int64_t batch_size) override {
    return validate_model(model_, examples, batch_size, o_.label_smoothing, o_.ids);
  }
  const char* validation_method() const override { return "greedy decoding"; }

 private:
  models::EncoderDecoderModel& model_;
  ObjectiveOptions o_;
};

// GPT: every position predicts the next token, the line closed by <eos>.
class CausalLmObjective : public Objective {
 public:
  CausalLmObjective(models::DecoderOnlyModel& model, const ObjectiveOptions& o) : model_(model), o_(o) {}

  BatchLoss loss(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices, int64_t) override {
    const Batch b = make_lm_batch(dataset, indices, o_.ids);
    return next_token_loss(model_, model_.forward(b.tgt_in), b.tgt_out, b.n_tgt_tokens, o_);
  }
  ValidationResult validate(const std::vector<io::Example>& examples, int64_t batch_size) override {
    return validate_language_model(model_, examples, batch_size, o_.label_smoothing, o_.ids);
  }
  const char* validation_method() const override { return "next-token loss"; }

 private:
  models::DecoderOnlyModel& model_;
  ObjectiveOptions o_;
};

// BERT: fresh masks every epoch (masking_seed), the loss at the chosen positions only.
class MaskedLmObjective : public Objective {
 public:
  MaskedLmObjective(models::EncoderOnlyModel& model, const ObjectiveOptions& o) : model_(model), o_(o) {
    validate_options(o_.masking);
  }

  BatchLoss loss(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices,
                 int64_t epoch) override {
    const MaskedBatch b = make_masked_batch(dataset, indices, o_.masking, o_.seed, epoch, o_.ids.pad);
    const Tensor logits = model_.forward(b.input);  // [B, S, V]
    return with_moe_aux(model_, {masked_lm_loss(logits, b.labels, o_.ids.pad, o_.label_smoothing), b.n_chosen});
  }
  ValidationResult validate(const std::vector<io::Example>& examples, int64_t batch_size) override {
    return validate_masked_lm(model_, examples, batch_size, o_.label_smoothing, o_.masking, o_.seed, o_.ids.pad);
  }
  const char* validation_method() const override { return "masked tokens"; }

 private:
  static void validate_options(const MaskingOptions& m) { train::validate(m); }
  models::EncoderOnlyModel& model_;
  ObjectiveOptions o_;
};

// ---- fine-tuning (finetune.h) ------------------------------------------------------------------

// The logits and targets of (prompt, response) rows of dataset[indices] (`responses` replacing
// the examples' tgt when given): decoder-only rows <bos> prompt response with the prompt
// positions' targets ignored, or encoder-decoder rows with the prompt as source.
struct ResponseRows {
  Tensor logits;   // [B, T, V]
  Tensor targets;  // [B, T]
  int64_t ignore = kIgnoreTarget;
  int64_t tokens = 0;  // counted target positions
};

ResponseRows response_rows(models::Model& model, const std::vector<io::Example>& dataset,
                           const std::vector<int64_t>& indices, const std::vector<std::vector<int64_t>>* responses,
                           SpecialIds ids) {
  ResponseRows r;
  if (auto* dec = dynamic_cast<models::DecoderOnlyModel*>(&model)) {
    const Batch b = make_sft_batch(dataset, indices, ids, responses);
    r.logits = dec->forward(b.tgt_in);
    r.targets = b.tgt_out;
    r.tokens = b.n_tgt_tokens;
    return r;
  }
  auto* s2s = dynamic_cast<models::EncoderDecoderModel*>(&model);
  ATTN_CHECK(s2s != nullptr, "objective", "prompt/response rows need a decoder_only or encoder_decoder model, not ",
             models::arch_name(model.arch()));
  std::vector<io::Example> rows;
  for (int64_t k : indices) {
    ATTN_CHECK(k >= 0 && k < static_cast<int64_t>(dataset.size()), "objective", "index ", k, " out of range");
    io::Example e = dataset[static_cast<size_t>(k)];
    if (responses) e.tgt = (*responses)[static_cast<size_t>(k)];
    rows.push_back(std::move(e));
  }
  const Batch b = make_batch(rows, ids);
  r.logits = s2s->forward(b.src, b.tgt_in);
  r.targets = b.tgt_out;
  r.ignore = ids.pad;
  r.tokens = b.n_tgt_tokens;
  return r;
}

// Instruction tuning of a decoder-only model: next-token loss over the response and <eos> only.
class SftLmObjective : public Objective {
 public:
  SftLmObjective(models::DecoderOnlyModel& model, const ObjectiveOptions& o) : model_(model), o_(o) {}

  BatchLoss loss(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices, int64_t) override {
    Batch b;
    Tensor logits;  // [B, T, V]
    if (o_.sft_pack > 0) {
      PackedSftBatch packed = make_packed_sft_batch(dataset, indices, o_.ids, o_.sft_pack);
      logits = model_.forward_packed(packed.batch.tgt_in, packed.positions, packed.segments);
      b = std::move(packed.batch);
    } else {
      b = make_sft_batch(dataset, indices, o_.ids);
      logits = model_.forward(b.tgt_in);
    }
    const int64_t rows = logits.size(0) * logits.size(1), V = logits.size(2);
    return with_moe_aux(model_, {cross_entropy(logits.reshape({rows, V}), b.tgt_out.reshape({rows}), kIgnoreTarget,
                                                o_.label_smoothing),
                                 b.n_tgt_tokens});
  }
  ValidationResult validate(const std::vector<io::Example>& examples, int64_t batch_size) override {
    check_batch_size(batch_size);
    ValidationResult r;
    r.exact_acc = kNaN;
    if (examples.empty()) return r;
    EvalScope eval(model_);
    NoGradGuard no_grad;
    double loss_sum = 0, nll_sum = 0;
    int64_t hits = 0;
    for (size_t begin = 0; begin < examples.size(); begin += static_cast<size_t>(batch_size)) {
      const size_t end = std::min(examples.size(), begin + static_cast<size_t>(batch_size));
      std::vector<int64_t> indices;
      for (size_t k = begin; k < end; ++k) indices.push_back(static_cast<int64_t>(k));
      const Batch b = make_sft_batch(examples, indices, o_.ids);
      const Tensor logits = model_.forward(b.tgt_in);  // [B, T, V]
      const int64_t rows = logits.size(0) * logits.size(1), V = logits.size(2);
      const Tensor flat = logits.reshape({rows, V});
      const Tensor targets = b.tgt_out.reshape({rows});
      const double n = static_cast<double>(b.n_tgt_tokens);
      loss_sum += cross_entropy(flat, targets, kIgnoreTarget, o_.label_smoothing).item() * n;
      nll_sum += cross_entropy(flat, targets, kIgnoreTarget, 0.0).item() * n;
      hits += argmax_hits(flat, targets, kIgnoreTarget);
      r.tokens += b.n_tgt_tokens;
      r.sequences += b.size();
    }
    r.loss = loss_sum / static_cast<double>(r.tokens);
    r.nll = nll_sum / static_cast<double>(r.tokens);
    r.token_acc = static_cast<double>(hits) / static_cast<double>(r.tokens);
    return r;
  }
  const char* validation_method() const override { return "response tokens"; }

 private:
  models::DecoderOnlyModel& model_;
  ObjectiveOptions o_;
};

// DPO: the examples' tgt is the chosen response, the rejected one and both reference
// log-probabilities are in the options' preference sets (same indices).
class DpoObjective : public Objective {
 public:
  DpoObjective(models::Model& model, const ObjectiveOptions& o) : model_(model), o_(o) {
    ATTN_CHECK(o_.train_preferences != nullptr, "objective", "dpo needs preference data");
    ATTN_CHECK(o_.dpo_beta > 0 && std::isfinite(o_.dpo_beta), "objective", "dpo beta must be positive, got ",
               o_.dpo_beta);
  }

  BatchLoss loss(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices, int64_t) override {
    const PreferenceSet& pref = *o_.train_preferences;
    ATTN_CHECK(pref.rejected.size() == dataset.size(), "objective", "dpo: ", pref.rejected.size(),
               " rejected responses for ", dataset.size(), " training examples");
    const DType dt = model_.config().dtype;
    const int64_t P = static_cast<int64_t>(indices.size());
    std::vector<double> ref_c, ref_r;
    for (int64_t k : indices) {
      ref_c.push_back(pref.ref_chosen[static_cast<size_t>(k)]);
      ref_r.push_back(pref.ref_rejected[static_cast<size_t>(k)]);
    }
    const ResponseRows chosen = response_rows(model_, dataset, indices, nullptr, o_.ids);
    const Tensor pc = sequence_logprobs(chosen.logits, chosen.targets, chosen.ignore);  // [P]
    const ResponseRows rejected = response_rows(model_, dataset, indices, &pref.rejected, o_.ids);
    const Tensor pr = sequence_logprobs(rejected.logits, rejected.targets, rejected.ignore);  // [P]
    const Tensor loss = dpo_loss(pc, pr, Tensor::from_vector<double>(ref_c, {P}).to(dt),
                                 Tensor::from_vector<double>(ref_r, {P}).to(dt), o_.dpo_beta);
    return with_moe_aux(model_, {loss, P});  // the mean is over pairs
  }
  ValidationResult validate(const std::vector<io::Example>& examples, int64_t batch_size) override {
    ValidationResult r;
    r.token_acc = r.exact_acc = kNaN;
    if (examples.empty()) return r;
    const PreferenceSet* pref = o_.valid_preferences.get();
    ATTN_CHECK(pref != nullptr && pref->rejected.size() == examples.size(), "objective",
               "dpo: no preference data for the ", examples.size(), " validation examples");
    std::vector<int64_t> tokens;
    const std::vector<double> pc = response_logprobs(model_, examples, nullptr, batch_size, o_.ids, &tokens);
    const std::vector<double> pr = response_logprobs(model_, examples, &pref->rejected, batch_size, o_.ids);
    r.has_preference = true;
    r.preference = preference_stats(pc, pr, pref->ref_chosen, pref->ref_rejected, o_.dpo_beta);
    r.loss = r.preference.loss;
    double nll = 0;
    for (size_t k = 0; k < pc.size(); ++k) {
      nll -= pc[k];
      r.tokens += tokens[k];
    }
    r.nll = nll / static_cast<double>(r.tokens);
    r.sequences = static_cast<int64_t>(examples.size());
    if (o_.reference) r.kl_ref = response_kl(model_, *o_.reference, examples, batch_size, o_.ids);
    return r;
  }
  const char* validation_method() const override { return "preference pairs"; }

 private:
  models::Model& model_;
  ObjectiveOptions o_;
};

}  // namespace

std::vector<double> response_logprobs(models::Model& model, const std::vector<io::Example>& examples,
                                      const std::vector<std::vector<int64_t>>* responses, int64_t batch_size,
                                      SpecialIds ids, std::vector<int64_t>* tokens) {
  check_batch_size(batch_size);
  EvalScope eval(model);
  NoGradGuard no_grad;
  std::vector<double> out;
  if (tokens) tokens->clear();
  for (size_t begin = 0; begin < examples.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(examples.size(), begin + static_cast<size_t>(batch_size));
    std::vector<int64_t> indices;
    for (size_t k = begin; k < end; ++k) indices.push_back(static_cast<int64_t>(k));
    const ResponseRows rows = response_rows(model, examples, indices, responses, ids);
    const std::vector<double> lp = sequence_logprobs(rows.logits, rows.targets, rows.ignore).to_vector<double>();
    out.insert(out.end(), lp.begin(), lp.end());
    if (tokens) {
      const std::vector<int64_t> t = rows.targets.to_vector<int64_t>();
      const int64_t T = rows.targets.size(1);
      for (size_t b = 0; b < indices.size(); ++b) {
        int64_t n = 0;
        for (int64_t i = 0; i < T; ++i) n += t[b * static_cast<size_t>(T) + static_cast<size_t>(i)] != rows.ignore;
        tokens->push_back(n);
      }
    }
  }
  return out;
}

double response_kl(models::Model& policy, models::Model& ref, const std::vector<io::Example>& examples,
                   int64_t batch_size, SpecialIds ids) {
  check_batch_size(batch_size);
  if (examples.empty()) return kNaN;
  EvalScope eval_policy(policy);
  EvalScope eval_ref(ref);
  NoGradGuard no_grad;
  double kl_sum = 0;
  int64_t positions = 0;
  for (size_t begin = 0; begin < examples.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(examples.size(), begin + static_cast<size_t>(batch_size));
    std::vector<int64_t> indices;
    for (size_t k = begin; k < end; ++k) indices.push_back(static_cast<int64_t>(k));
    const ResponseRows p = response_rows(policy, examples, indices, nullptr, ids);
    const ResponseRows q = response_rows(ref, examples, indices, nullptr, ids);
    ATTN_CHECK(p.logits.shape() == q.logits.shape(), "response_kl", "the policy's logits ", p.logits.str(),
               " and the reference's ", q.logits.str(), " differ in shape");
    const int64_t V = p.logits.size(2);
    const std::vector<double> a = p.logits.to_vector<double>(), b = q.logits.to_vector<double>();  // [B*T*V]
    const std::vector<int64_t> t = p.targets.to_vector<int64_t>();                              // [B*T]
    // log-sum-exp of a row of V logits, shifted by its maximum.
    const auto lse = [V](const double* row) {
      const double m = *std::max_element(row, row + V);
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(row[v] - m);
      return m + std::log(s);
    };
    for (size_t n = 0; n < t.size(); ++n) {
      if (t[n] == p.ignore) continue;
      const double* pa = a.data() + n * static_cast<size_t>(V);
      const double* pb = b.data() + n * static_cast<size_t>(V);
      const double za = lse(pa), zb = lse(pb);
      double kl = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double lp = pa[v] - za, lq = pb[v] - zb;
        kl += std::exp(lp) * (lp - lq);
      }
      kl_sum += kl;
      ++positions;
    }
  }
  return positions > 0 ? kl_sum / static_cast<double>(positions) : kNaN;
}

std::unique_ptr<Objective> make_objective(models::Model& model, const ObjectiveOptions& options) {
  if (options.kind == ObjectiveKind::Dpo) {
    ATTN_CHECK(model.arch() != models::Arch::EncoderOnly, "objective",
               "dpo needs a model that generates responses (decoder_only or encoder_decoder), not encoder_only");
    return std::make_unique<DpoObjective>(model, options);
  }
  if (options.kind == ObjectiveKind::Sft) {
    if (auto* m = dynamic_cast<models::DecoderOnlyModel*>(&model)) return std::make_unique<SftLmObjective>(*m, options);
    if (auto* m = dynamic_cast<models::EncoderDecoderModel*>(&model))
      return std::make_unique<Seq2SeqObjective>(*m, options);  // prompt -> response: ordinary seq2seq
    fail("objective", "sft needs a decoder_only or encoder_decoder model, not ", models::arch_name(model.arch()));
  }
  if (auto* m = dynamic_cast<models::EncoderDecoderModel*>(&model)) return std::make_unique<Seq2SeqObjective>(*m, options);
  if (auto* m = dynamic_cast<models::DecoderOnlyModel*>(&model)) return std::make_unique<CausalLmObjective>(*m, options);
  if (auto* m = dynamic_cast<models::EncoderOnlyModel*>(&model)) return std::make_unique<MaskedLmObjective>(*m, options);
  fail("objective", "no training objective for a model of arch ", models::arch_name(model.arch()));
}

}  // namespace attn::train
