// run/speculative.cpp — see attn/run/speculative.h: the draft's fit to its target.
#include "attn/run/speculative.h"

#include <cstdio>

#include "attn/core/error.h"

namespace attn::run {

void validate(const SpeculativeSettings& s) {
  ATTN_CHECK(s.draft_tokens >= 1, "speculative", "--draft-tokens must be >= 1, got ", s.draft_tokens);
  ATTN_CHECK(!(s.draft != nullptr && s.lookup), "speculative",
             "--draft and --prompt-lookup exclude each other (prompt lookup drafts without a model)");
}

void check_draft(const ModelFolder& target, const ModelFolder& draft, const char* command) {
  const models::Arch ta = target.base->config().arch, da = draft.base->config().arch;
  ATTN_CHECK(ta == da, command, "the draft model '", draft.dir, "' is ", models::arch_name(da), " and the target '",
             target.dir, "' is ", models::arch_name(ta), ": a draft must be of the target's family");
  ATTN_CHECK(draft.tgt_vocab_size == target.tgt_vocab_size && draft.src_vocab_size == target.src_vocab_size, command,
             "the draft model '", draft.dir, "' has a vocabulary of ", draft.tgt_vocab_size, " tokens",
             draft.src_vocab_size != draft.tgt_vocab_size ? str_cat(" (source ", draft.src_vocab_size, ")") : "",
             " and the target '", target.dir, "' one of ", target.tgt_vocab_size, " tokens",
             target.src_vocab_size != target.tgt_vocab_size ? str_cat(" (source ", target.src_vocab_size, ")") : "",
             ": a draft must share the target's vocabulary");
  ATTN_CHECK(draft.pad == target.pad && draft.bos == target.bos && draft.eos == target.eos, command,
             "the draft model '", draft.dir, "' has special ids pad ", draft.pad, ", bos ", draft.bos, ", eos ",
             draft.eos, " and the target '", target.dir, "' pad ", target.pad, ", bos ", target.bos, ", eos ",
             target.eos, ": a draft must share the target's vocabulary");
  if (draft.vocab && target.vocab) {
    ATTN_CHECK(draft.vocab->size() == target.vocab->size(), command, "the draft model '", draft.dir,
               "' has a vocab.json of ", draft.vocab->size(), " tokens and the target '", target.dir, "' one of ",
               target.vocab->size(), ": a draft must share the target's vocabulary");
    for (int64_t id = 0; id < target.vocab->size(); ++id)
      ATTN_CHECK(draft.vocab->token(id) == target.vocab->token(id), command, "token ", id, " is '",
                 draft.vocab->token(id), "' in the draft model '", draft.dir, "' and '", target.vocab->token(id),
                 "' in the target '", target.dir, "': a draft must share the target's vocabulary");
  }
}

std::string stats_line(const decode::SpeculativeStats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "speculative: %lld draft tokens, %lld accepted (%.1f%%); %lld tokens in %lld target passes "
                "(%.2f per row and pass), %lld draft passes",
                static_cast<long long>(s.drafted), static_cast<long long>(s.accepted), 100.0 * s.acceptance(),
                static_cast<long long>(s.generated), static_cast<long long>(s.target_passes), s.tokens_per_pass(),
                static_cast<long long>(s.draft_passes));
  return buf;
}

void add_stats(decode::SpeculativeStats& total, const decode::SpeculativeStats& run) {
  total.target_passes += run.target_passes;
  total.target_rows += run.target_rows;
  total.draft_passes += run.draft_passes;
  total.drafted += run.drafted;
  total.accepted += run.accepted;
  total.generated += run.generated;
}

}  // namespace attn::run
