// attn/run/speculative.h — the speculative-decoding settings that `attn generate` and `attn
// translate` share (--draft, --draft-tokens, --prompt-lookup): a draft model folder or prompt
// lookup for decode/speculative.h, and the check that a draft fits its target (the same family
// and vocabulary). Greedy and sampling only, never beam search.
#pragma once

#include <cstdint>
#include <string>

#include "attn/decode/speculative.h"
#include "attn/run/model_folder.h"

namespace attn::run {

struct SpeculativeSettings {
  const ModelFolder* draft = nullptr;  // the draft model (check_draft first), or null
  bool lookup = false;                 // prompt lookup (no draft model) instead
  int64_t draft_tokens = 4;            // K, draft tokens per round (>= 1)
  decode::SpeculativeStats* stats = nullptr;  // counts are added here when non-null
  bool enabled() const { return draft != nullptr || lookup; }
};

// Throws attn::Error naming the first invalid setting (as its command-line flag).
void validate(const SpeculativeSettings& settings);

// That `draft` can draft for `target` in `command`: the same model family, vocabulary sizes,
// special ids (PAD, BOS, EOS) and, when both folders have a vocab.json, the same tokens. An
// attn::Error naming both folders and what differs otherwise.
void check_draft(const ModelFolder& target, const ModelFolder& draft, const char* command);

// llama.cpp-style summary of a run's counts, one line without a newline: draft tokens,
// accepted (and the rate), tokens, target passes, tokens per row and pass, draft passes.
std::string stats_line(const decode::SpeculativeStats& stats);

// Adds `run`'s counts to `total`.
void add_stats(decode::SpeculativeStats& total, const decode::SpeculativeStats& run);

}  // namespace attn::run
