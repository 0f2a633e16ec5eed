// attn vocab train|encode|decode: a shared subword vocabulary (§5.1: byte-pair encoding shared
// between source and target) trained with SentencePiece on text files, and the two directions of
// using it on stdin lines. `train --output DIR` writes DIR/sentencepiece.model, the name a model
// folder keeps it under; `--output FILE.model` writes that file. `--mask` reserves [MASK] at id 4
// for encoder-only models; `attn train --vocab` uses the result. Not here: joint vocabularies of
// separate source and target models, or training from a TSV's columns (give the columns as files).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/lines.h"
#include "attn/io/sentencepiece_vocab.h"
#include "attn/run/token_codec.h"
#include "commands.h"

namespace attn::cli {

namespace {

struct VocabTrainOptions {
  std::vector<std::string> inputs;
  int64_t size = 8000;
  std::string type = "unigram";
  std::string output;
  double character_coverage = 1.0;
  std::string normalization = "nmt_nfkc";
  bool byte_fallback = false;
  int64_t max_sentences = 0;
  int64_t threads = 1;
  int64_t seed = 1;
  bool mask = false;
};

struct VocabUseOptions {
  std::string vocab;
  bool pieces = false;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int run_vocab_train(const VocabTrainOptions& o) {
  ATTN_CHECK(o.seed >= 0, "vocab", "--seed must be >= 0, got ", o.seed);
  io::SentencePieceTrainOptions t;
  t.inputs = o.inputs;
  t.vocab_size = o.size;
  t.model = io::parse_subword_model(o.type);
  t.character_coverage = o.character_coverage;
  t.normalization = o.normalization;
  t.byte_fallback = o.byte_fallback;
  t.max_sentences = o.max_sentences;
  t.threads = o.threads;
  t.seed = static_cast<uint64_t>(o.seed);
  t.mask_symbol = o.mask;
  io::SentencePieceTrainReport report;
  const io::SentencePieceVocab vocab = io::SentencePieceVocab::train(t, &report);
  std::string path = o.output;
  if (ends_with(o.output, ".model")) {
    vocab.save(o.output);
  } else {
    path = vocab.save_to_folder(o.output);
  }
  std::printf("vocabulary:  %s, %lld pieces (ids 0-3: <pad> <bos> <eos> <unk>%s)\n", io::subword_model_name(t.model),
              static_cast<long long>(vocab.size()), vocab.has_mask() ? ", 4: [MASK]" : "");
  std::printf("written to:  %s\n", path.c_str());
  std::printf("fingerprint: %s\n", vocab.fingerprint().c_str());
  std::printf("lines:       %lld read, %lld used, %lld empty skipped, %lld over %lld bytes skipped, %lld with CRLF\n",
              static_cast<long long>(report.lines), static_cast<long long>(report.sentences),
              static_cast<long long>(report.empty_lines), static_cast<long long>(report.long_lines),
              static_cast<long long>(t.max_sentence_bytes), static_cast<long long>(report.crlf_lines));
  return 0;
}

// stdin lines to space-separated ids (or pieces); an empty line gives an empty line.
int run_vocab_encode(const VocabUseOptions& o) {
  const io::SentencePieceVocab vocab = io::SentencePieceVocab::load(o.vocab);
  io::LineReader reader(std::cin);
  std::string line;
  while (reader.next(line)) {
    std::vector<int64_t> ids;
    try {
      ids = vocab.encode(line);
    } catch (const Error& e) {
      fail("vocab", "stdin line ", reader.line_number(), ": ", e.what());
    }
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ' ';
      out += o.pieces ? vocab.token(ids[i]) : std::to_string(ids[i]);
    }
    std::printf("%s\n", out.c_str());
  }
  return 0;
}

// stdin lines of space-separated ids to detokenized text.
int run_vocab_decode(const VocabUseOptions& o) {
  const io::SentencePieceVocab vocab = io::SentencePieceVocab::load(o.vocab);
  io::LineReader reader(std::cin);
  std::string line;
  while (reader.next(line)) {
    std::string text;
    try {
      text = vocab.decode(run::parse_ids(line));
    } catch (const Error& e) {
      fail("vocab", "stdin line ", reader.line_number(), ": ", e.what());
    }
    std::printf("%s\n", text.c_str());
  }
  return 0;
}

}  // namespace

void register_vocab(CLI::App& app, Action* action) {
  CLI::App* cmd = app.add_subcommand("vocab", "train and use a SentencePiece subword vocabulary");
  cmd->require_subcommand(1);

  auto t = std::make_shared<VocabTrainOptions>();
  CLI::App* train =
      cmd->add_subcommand("train", "train a BPE or unigram vocabulary on text files (one sentence a line)");
  train->add_option("--input", t->inputs, "text files; give source and target files for a shared vocabulary")
      ->required()
      ->expected(1, -1);
  train->add_option("--size", t->size, "pieces, the 4 special tokens included")->capture_default_str();
  train->add_option("--type", t->type, "bpe or unigram")->capture_default_str();
  train->add_option("--output", t->output, "folder (writes FOLDER/sentencepiece.model) or a FILE.model")->required();
  train->add_option("--character-coverage", t->character_coverage,
                    "share of characters kept, the rarest map to <unk> (0.9995 suits large alphabets)")
      ->capture_default_str();
  train->add_option("--normalization", t->normalization, "SentencePiece rule: nmt_nfkc, nfkc, identity, ...")
      ->capture_default_str();
  train->add_flag("--byte-fallback", t->byte_fallback, "unknown characters as UTF-8 byte pieces instead of <unk>");
  train->add_option("--max-sentences", t->max_sentences, "train on a random sample of this many lines; 0 = all")
      ->capture_default_str();
  train->add_option("--threads", t->threads, "training threads")->capture_default_str();
  train->add_option("--seed", t->seed, "seed of the --max-sentences sample")->capture_default_str();
  train->add_flag("--mask", t->mask,
                  "reserve [MASK] at id 4, as encoder-only models (attn train --arch encoder-only) need");
  train->callback([t, action] { *action = [t] { return run_vocab_train(*t); }; });

  auto e = std::make_shared<VocabUseOptions>();
  CLI::App* encode = cmd->add_subcommand("encode", "stdin lines to space-separated ids");
  encode->add_option("--vocab", e->vocab, "sentencepiece.model, or a folder holding it")->required();
  encode->add_flag("--pieces", e->pieces, "print the pieces instead of their ids");
  encode->callback([e, action] { *action = [e] { return run_vocab_encode(*e); }; });

  auto d = std::make_shared<VocabUseOptions>();
  CLI::App* decode = cmd->add_subcommand("decode", "stdin lines of space-separated ids to detokenized text");
  decode->add_option("--vocab", d->vocab, "sentencepiece.model, or a folder holding it")->required();
  decode->callback([d, action] { *action = [d] { return run_vocab_decode(*d); }; });
}

}  // namespace attn::cli
