// attn fill-mask --model DIR --text "a[MASK]c": ranks the candidates for every [MASK] of a text
// with an encoder-only (BERT-style) model trained by `attn train --arch encoder-only`. For each
// text it prints the text with every mask replaced by its best candidate, then one line per mask
// with the --top-k candidates and their probabilities. Texts come from --text (repeatable),
// --input FILE or stdin, one per line, and run as batches.
// Not here: decoder-only or encoder-decoder models, filling several masks jointly.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/lines.h"
#include "attn/ops/threads.h"
#include "attn/run/fill_mask.h"
#include "attn/run/model_folder.h"
#include "attn/train/trainer.h"
#include "commands.h"

namespace attn::cli {

namespace {

constexpr const char* kCmd = "fill-mask";

struct FillMaskOptions {
  std::string model_dir;
  std::vector<std::string> texts;
  std::string input;
  int64_t top_k = 5;
  int64_t batch_size = 32;
  int64_t threads = 0;
};

// A token as the output shows it: quoted, control characters escaped.
std::string shown(const std::string& token) {
  std::string out = "'";
  for (unsigned char ch : token) {
    if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "'";
}

int run_fill_mask(const FillMaskOptions& o) {
  ATTN_CHECK(o.threads >= 0, kCmd, "--threads must be >= 0, got ", o.threads);
  if (o.threads > 0) attn::set_num_threads(o.threads);
  ATTN_CHECK(o.top_k >= 1, kCmd, "--top-k must be >= 1, got ", o.top_k);
  ATTN_CHECK(o.batch_size >= 1, kCmd, "--batch-size must be >= 1, got ", o.batch_size);
  ATTN_CHECK(o.texts.empty() || o.input.empty(), kCmd, "give texts with --text or --input, not both");
  const run::ModelFolder folder = run::open_model_folder(o.model_dir, kCmd, true, models::Arch::EncoderOnly);
  const io::Vocab& vocab = *folder.vocab;
  ATTN_CHECK(vocab.has_mask(), kCmd, "the vocabulary of '", o.model_dir, "' has no ", io::Vocab::kMaskToken,
             " token: the model was not trained with the masked-LM objective");

  std::vector<std::vector<int64_t>> pending;
  std::vector<std::string> pending_text;
  const auto flush = [&] {
    if (pending.empty()) return;
    const auto predictions = run::fill_masks(folder, pending, o.top_k);
    for (size_t i = 0; i < pending.size(); ++i) {
      std::vector<int64_t> filled = pending[i];
      for (const run::MaskPrediction& m : predictions[i])
        if (!m.candidates.empty()) filled[static_cast<size_t>(m.position)] = m.candidates.front().first;
      std::printf("%s -> %s\n", pending_text[i].c_str(), vocab.decode(filled).c_str());
      for (size_t k = 0; k < predictions[i].size(); ++k) {
        const run::MaskPrediction& m = predictions[i][k];
        std::printf("  mask %zu (token %lld):", k + 1, static_cast<long long>(m.position + 1));
        for (size_t j = 0; j < m.candidates.size(); ++j)
          std::printf("%s %s %.4f", j ? "," : "", shown(vocab.token(m.candidates[j].first)).c_str(),
                      m.candidates[j].second);
        std::printf("\n");
      }
    }
    std::fflush(stdout);
    pending.clear();
    pending_text.clear();
  };
  const auto add = [&](const std::string& text, const std::string& where) {
    try {
      pending.push_back(run::read_masked_text(text, vocab, kCmd, where));
    } catch (const Error&) {
      flush();  // the texts before the bad one are still answered
      throw;
    }
    pending_text.push_back(text);
    if (static_cast<int64_t>(pending.size()) >= o.batch_size) flush();
  };

  if (!o.texts.empty()) {
    for (size_t i = 0; i < o.texts.size(); ++i) add(o.texts[i], str_cat("--text ", i + 1));
  } else {
    std::ifstream file;
    if (!o.input.empty()) {
      file.open(o.input);
      ATTN_CHECK(file.good(), kCmd, "cannot read --input '", o.input, "'");
    }
    const std::string source = o.input.empty() ? std::string("stdin") : "'" + o.input + "'";
    io::LineReader reader(o.input.empty() ? std::cin : file);
    std::string line;
    int64_t n = 0;
    while (reader.next(line)) {
      add(line, str_cat(source, " line ", reader.line_number()));
      ++n;
    }
    ATTN_CHECK(n > 0, kCmd, source, " holds no text");
  }
  flush();
  return 0;
}

}  // namespace

void register_fill_mask(CLI::App& app, Action* action) {
  auto o = std::make_shared<FillMaskOptions>();
  CLI::App* cmd = app.add_subcommand(
      "fill-mask", "rank the candidates for every [MASK] of a text with an encoder-only (BERT-style) model");
  cmd->add_option("--model", o->model_dir, "model folder of an encoder-only model (attn train --arch encoder-only)")
      ->required();
  // One value per --text, taken as it is (CLI11 would otherwise read "[MASK]a[MASK]" as a list).
  cmd->add_option("--text", o->texts, "a text holding [MASK] at least once (repeat for several)")
      ->allow_extra_args(false);
  cmd->add_option("--input", o->input, "a file of texts, one per line (without --text or --input: stdin)");
  cmd->add_option("--top-k", o->top_k, "candidates listed per mask")->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "texts run together")->capture_default_str();
  cmd->add_option("--threads", o->threads, "OpenMP/BLAS threads; 0 = the runtime's default");
  cmd->callback([o, action] { *action = [o] { return run_fill_mask(*o); }; });
}

}  // namespace attn::cli
