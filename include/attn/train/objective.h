// attn/train/objective.h — what the trainer minimises and how it validates, one objective per
// model family, so that one training loop (trainer.h) serves all three:
//   encoder_decoder  teacher forcing with the target shifted right, label-smoothed cross
//                    entropy over the target tokens (paper §5.3-5.4); validation adds greedy
//                    decoding (token and exact-sequence accuracy)
//   decoder_only     next-token prediction: input <bos> x1..xn, targets x1..xn <eos> (GPT)
//   encoder_only     BERT's masked LM (masking.h): the loss only at the chosen positions
// and the fine-tuning objectives (finetune.h) chosen by ObjectiveOptions::kind:
//   sft  decoder_only: next-token prediction on prompt + response, the loss over the response
//        (and <eos>) only; encoder_decoder: teacher forcing, prompt as source (as above)
//   dpo  decoder_only and encoder_decoder: the DPO loss on preference triples against the
//        reference log-probabilities ObjectiveOptions carries (measured once, before training);
//        validation adds the KL to the frozen reference model when the options hold it
// Not here: the optimizer, schedule, batching order or checkpoints (the trainer's).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "attn/core/tensor.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "attn/train/batching.h"
#include "attn/train/finetune.h"
#include "attn/train/masking.h"
#include "attn/train/tasks.h"

namespace attn::train {

// Validation results on a set of examples. loss and nll are means per predicted token (the
// encoder-decoder's targets + EOS, the language model's tokens + EOS, the masked LM's chosen
// positions); token_acc is the encoder-decoder's greedy-decoding accuracy (see validate_model)
// or the single-stack models' teacher-forced argmax accuracy on those tokens; exact_acc is the
// encoder-decoder's exact-sequence accuracy (NaN for the single-stack models).
// DPO's validation sets `preference` (implicit-reward accuracy and margins, finetune.h): then
// loss is the DPO loss, nll the chosen responses' per-token NLL and token_acc NaN, and kl_ref
// the chosen responses' mean per-token KL(policy || reference) (response_kl; NaN without a
// reference model in the options).
struct ValidationResult {
  double loss = 0, nll = 0;
  double token_acc = 0, exact_acc = 0;
  int64_t tokens = 0, sequences = 0;
  bool has_preference = false;
  PreferenceStats preference{};
  double kl_ref = std::numeric_limits<double>::quiet_NaN();
};

// Teacher-forced loss and greedy accuracies of `model` (put in eval mode for the call and
// restored) on `examples`, in batches of `batch_size`. The accuracies are
// decode::score_sequence's (decode/sequence_score.h), which `attn eval` shares: token accuracy counts, for every
// reference of L tokens, the L + 1 positions "tokens then EOS": position i is right when the
// greedy output has the reference token there (EOS at position L, i.e. the output stopped
// exactly there). Too-short outputs miss the positions they do not reach, too-long ones miss
// the EOS position; PAD never counts. Exact accuracy: the output equals the reference and
// ended with EOS. Greedy decoding stops after L_max + 1 tokens (L_max the batch's longest
// reference): no later token can change either accuracy.
ValidationResult validate_model(models::EncoderDecoderModel& model, const std::vector<io::Example>& examples,
                                int64_t batch_size, double label_smoothing, SpecialIds ids = {});

// Teacher-forced next-token loss, nll and argmax accuracy of a language model on text examples
// (make_lm_batch), eval mode for the call. exact_acc is NaN.
ValidationResult validate_language_model(models::DecoderOnlyModel& model, const std::vector<io::Example>& examples,
                                         int64_t batch_size, double label_smoothing, SpecialIds ids = {});

// Masked-LM loss, nll and accuracy at the chosen positions of `examples`, masked with
// masking_seed(seed, -1, k): the same masks every time, so epochs compare. exact_acc is NaN.
ValidationResult validate_masked_lm(models::EncoderOnlyModel& model, const std::vector<io::Example>& examples,
                                    int64_t batch_size, double label_smoothing, const MaskingOptions& masking,
                                    uint64_t seed, int64_t pad = io::Vocab::kPad);

// The loss of one training batch: the mean over `tokens` predicted tokens, recorded on the tape;
// for a mixture-of-experts model plus moe_aux_loss_weight times its load-balancing loss.
struct BatchLoss {
  Tensor loss;
  int64_t tokens = 0;
};

class Objective {
 public:
  virtual ~Objective() = default;
  // The loss of training examples dataset[indices...] in 0-based epoch `epoch` (the masked LM
  // draws its masks from it), the model in whatever mode the trainer set.
  virtual BatchLoss loss(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices,
                         int64_t epoch) = 0;
  // Validation on `examples` in batches of `batch_size` (eval mode, no tape).
  virtual ValidationResult validate(const std::vector<io::Example>& examples, int64_t batch_size) = 0;
  // What validation does, for progress lines: "greedy decoding", "teacher forcing", ...
  virtual const char* validation_method() const = 0;
};

// Settings every objective shares.
struct ObjectiveOptions {
  double label_smoothing = 0.0;
  SpecialIds ids{};
  MaskingOptions masking{};  // encoder_only; its ids are set from the vocabulary by the caller
  uint64_t seed = 0;         // encoder_only: masking_seed's run seed
  ObjectiveKind kind = ObjectiveKind::Pretrain;
  // dpo: beta, and the preference data of the training examples (loss() is only ever given
  // those) and of the validation examples (validate()). Shared, read-only, by replicas.
  double dpo_beta = 0.1;
  std::shared_ptr<const PreferenceSet> train_preferences, valid_preferences;
  // dpo: the frozen reference model itself, for validation's KL (kl_ref); none: kl_ref is NaN.
  // Only validate() uses it (never the replicas' loss()).
  std::shared_ptr<models::Model> reference;
  // sft on a decoder_only model: 0 = one pair per row; N >= 2 = each batch's pairs packed into
  // rows of at most N tokens (make_packed_sft_batch), attention kept within each pair.
  // Validation is unpacked (the same values: packing changes no pair's logits).
  int64_t sft_pack = 0;
};

// Log-probabilities of responses under `model` (eval mode for the call, no tape): for every
// example (src = prompt, tgt = response; `responses` replaces tgt when given, one per example),
// log p(response <eos> | prompt) summed over the response's tokens and <eos>, in batches of
// `batch_size`. decoder_only reads <bos> prompt response (make_sft_batch), encoder_decoder the
// prompt as source. `tokens`, when given, receives the positions counted per example.
std::vector<double> response_logprobs(models::Model& model, const std::vector<io::Example>& examples,
                                      const std::vector<std::vector<int64_t>>* responses, int64_t batch_size,
                                      SpecialIds ids, std::vector<int64_t>* tokens = nullptr);

// The mean per-token KL(policy || ref) on the responses of `examples` (each example's tgt;
// rows as response_logprobs builds them), exact over the vocabulary: at every position that
// predicts a response token or <eos>, sum_v pi(v) (log pi(v) - log ref(v)) from both models'
// full next-token distributions (computed in double), averaged over all those positions of all
// examples. Both models in eval mode for the call, no tape; they must share the vocabulary.
// 0 when policy and reference agree, never negative (up to rounding). No examples: NaN.
double response_kl(models::Model& policy, models::Model& ref, const std::vector<io::Example>& examples,
                   int64_t batch_size, SpecialIds ids);

// The objective of `model`'s family and options.kind (holding a reference: the model must
// outlive it). sft and dpo on an encoder_only model, or dpo without preference data, are errors.
std::unique_ptr<Objective> make_objective(models::Model& model, const ObjectiveOptions& options);

}  // namespace attn::train
