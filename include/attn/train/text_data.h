// attn/train/text_data.h — a plain-text corpus for the single-stack models: every non-blank
// line of the file is one training sequence, split into character or whitespace tokens
// (io/vocab.h). A decoder-only (GPT-style) example is the line as a target without a source
// (make_lm_batch feeds <bos> line and predicts line <eos>); an encoder-only (BERT-style)
// example is the line as a source without a target (masked by train/masking.h).
// A SentencePiece model may serve as the vocabulary instead (tokens 'sentencepiece').
// For GPT-style training the lines may instead be packed into fixed-size blocks (pack_blocks),
// each block one decoder-only example. Not here: files larger than memory (corpus_stream.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/models/config.h"
#include "attn/train/tasks.h"
#include "attn/io/vocab.h"

namespace attn::train {

// One text file split into tokens. A trailing "\r" (CRLF) and a UTF-8 byte-order mark at the
// start are dropped; blank lines (empty, or only ASCII whitespace) are skipped and counted.
// Invalid UTF-8 is an error "[text] '<path>' line <n>: ...".
struct TextFile {
  std::string path;
  std::vector<std::vector<std::string>> lines;  // the tokens of every non-blank line
  std::vector<int64_t> line_numbers;            // 1-based line of each
  int64_t blank_lines = 0;
};
TextFile read_text(const std::string& path, io::Tokenization tokenization);

// The specials (and [MASK] when with_mask), then every token of the file sorted by its UTF-8
// bytes (deterministic, independent of line order).
io::Vocab build_text_vocab(const TextFile& file, io::Tokenization tokenization, bool with_mask);

// The lines as ids; an unknown token is an error naming path and line, or <unk> when map_unknown
// (then counted in *unknown_tokens when given). A SentencePiece vocabulary (the file read with
// io::Tokenization::SentencePiece) encodes each line with its model; characters it lacks become
// <unk> and are counted whatever map_unknown says.
std::vector<std::vector<int64_t>> encode_text(const TextFile& file, const io::Vocab& vocab, bool map_unknown,
                                              int64_t* unknown_tokens = nullptr);

// The example of one line of ids for a single-stack arch: decoder_only {src = {}, tgt = ids},
// encoder_only {src = ids, tgt = {}}. encoder_decoder is an error.
io::Example text_example(models::Arch arch, std::vector<int64_t> ids);
// The line of a text example (whichever side holds it).
const std::vector<int64_t>& text_ids(const io::Example& example);

// GPT-style block packing: the lines' ids concatenated, each line followed by `eos`, and cut
// into blocks of `block_ids` ids, in order. The last block is kept even when shorter (no text is
// dropped), so there are ceil((ids + lines) / block_ids) blocks. block_ids < 1 or eos < 0 is an
// error.
std::vector<std::vector<int64_t>> pack_blocks(const std::vector<std::vector<int64_t>>& lines, int64_t block_ids,
                                              int64_t eos);

// Training lines with the vocabulary built from them (with [MASK] for encoder_only), and the
// validation lines (valid_path may be empty: no validation set) with unknown tokens mapped to
// <unk> and counted in Dataset::valid_unknown_tokens; blank lines of both files are counted in
// Dataset::empty_lines. A file without any non-blank line is an error naming it. With tokenization
// SentencePiece the vocabulary is the model at vocab_path (tasks.h, load_given_vocab); an
// encoder-only model needs one that reserves [MASK] at id 4 (`attn vocab train --mask`).
// pack > 0 (decoder_only only, else an error) packs both files into blocks whose batch rows are
// `pack` tokens: pack_blocks of pack - 1 ids with <eos> between lines, since make_lm_batch
// puts <bos> in front of each block (and <eos> after it, as the block's last target).
Dataset load_text_dataset(const std::string& train_path, const std::string& valid_path, io::Tokenization tokenization,
                          models::Arch arch, const std::string& vocab_path = "", int64_t pack = 0);

}  // namespace attn::train
