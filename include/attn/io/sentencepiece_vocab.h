// attn/io/sentencepiece_vocab.h — a subword vocabulary (BPE or unigram) on Debian's SentencePiece
// library: trained from text files, encoding text to ids and decoding ids back to detokenized text,
// stored as SentencePiece's own model file inside a model folder. The paper (§5.1) shares one BPE
// vocabulary between source and target; this is that vocabulary. Ids 0..3 are <pad> <bos> <eos>
// <unk>, as in io::Vocab, so batching, masking and decoding need no change.
// With mask_symbol, "[MASK]" is reserved as a user-defined piece at id 4 (io::Vocab::kMask),
// so that one vocabulary also serves encoder-only models (BERT's masked LM).
// Not here: subword regularization (sampling), n-best segmentations, other user-defined symbols.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/io/run_files.h"

namespace attn::io {

enum class SubwordModel { Bpe, Unigram };
const char* subword_model_name(SubwordModel m);     // "bpe", "unigram"
SubwordModel parse_subword_model(const std::string& name);  // errors name the choices

struct SentencePieceTrainOptions {
  std::vector<std::string> inputs;  // text files, one sentence a line
  int64_t vocab_size = 8000;        // pieces, the 4 special tokens included
  SubwordModel model = SubwordModel::Unigram;
  double character_coverage = 1.0;  // share of characters kept; the rest map to <unk>
  std::string normalization = "nmt_nfkc";  // SentencePiece's rule: nmt_nfkc, nfkc, identity, ...
  bool byte_fallback = false;       // unknown characters as UTF-8 byte pieces instead of <unk>
  int64_t max_sentences = 0;        // 0: every line; else a seeded random sample of this many
  int64_t max_sentence_bytes = 4192;  // longer lines are skipped (and counted)
  int64_t threads = 1;
  uint64_t seed = 1;                // sampling of --max-sentences
  bool mask_symbol = false;         // reserve "[MASK]" at id 4 (encoder-only models)
};

// What training read. Lines are split on "\n"; a trailing "\r" (Windows line endings) and a
// UTF-8 byte-order mark at the start of a file are dropped; empty or whitespace-only lines and
// lines longer than max_sentence_bytes are skipped. Invalid UTF-8 is an error naming file and line.
struct SentencePieceTrainReport {
  int64_t lines = 0;           // lines read, all files
  int64_t sentences = 0;       // handed to the trainer
  int64_t empty_lines = 0;     // skipped: empty or whitespace only
  int64_t long_lines = 0;      // skipped: longer than max_sentence_bytes
  int64_t crlf_lines = 0;      // lines that ended in "\r\n"
};

class SentencePieceVocab {
 public:
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kBos = 1;
  static constexpr int64_t kEos = 2;
  static constexpr int64_t kUnk = 3;
  static constexpr int64_t kNumSpecial = 4;
  static constexpr int64_t kMask = 4;  // "[MASK]", when the model reserved it (has_mask())
  static constexpr const char* kMaskPiece = "[MASK]";

  // Trains on options.inputs. A missing or unreadable file, no usable line, a vocabulary size
  // below 5 or above what the text allows ("... <= N" from SentencePiece), or invalid UTF-8 is
  // an attn::Error. The report is filled when given.
  static SentencePieceVocab train(const SentencePieceTrainOptions& options, SentencePieceTrainReport* report = nullptr);
  // A vocabulary from SentencePiece's serialized model. A corrupted model, or one whose special
  // tokens are not <pad>=0 <bos>=1 <eos>=2 <unk>=3 (a model made elsewhere), is an error; `what`
  // names the source in messages.
  static SentencePieceVocab from_serialized(std::string bytes, const std::string& what = "model");
  // Reads `path`: a SentencePiece model file, or a folder holding kSentencePieceFileName.
  static SentencePieceVocab load(const std::string& path);
  // Writes the model atomically to `path` (a file; see save_to_folder for folders).
  void save(const std::string& path) const;
  // Writes dir/kSentencePieceFileName, creating dir when needed; returns the file's path.
  std::string save_to_folder(const std::string& dir) const;

  SentencePieceVocab(SentencePieceVocab&&) noexcept;
  SentencePieceVocab& operator=(SentencePieceVocab&&) noexcept;
  ~SentencePieceVocab();

  int64_t size() const;
  // The piece of `id` ("▁the", "<eos>"); an id outside [0, size()) is an error.
  const std::string& token(int64_t id) const;
  // The id of a piece, or <unk> when the vocabulary has no such piece.
  int64_t id(const std::string& piece) const;
  bool is_special(int64_t id) const { return id >= 0 && id < kNumSpecial; }
  // Whether "[MASK]" is a user-defined piece at id kMask (trained with mask_symbol).
  bool has_mask() const;

  // Ids of `text` (no <bos>/<eos> added); characters outside the vocabulary become <unk> (or
  // bytes with byte_fallback). The text is first normalized by the training's rule (nmt_nfkc:
  // NFKC, runs of spaces collapsed, leading and trailing spaces dropped), so decode(encode(x))
  // is x up to that normalization. Invalid UTF-8 is an error naming the byte.
  std::vector<int64_t> encode(const std::string& text) const;
  // The pieces of `text`, as encode() splits it.
  std::vector<std::string> encode_pieces(const std::string& text) const;
  // Detokenized text of `ids`: <pad> and <bos> are skipped, decoding stops at the first <eos>,
  // <unk> is written "<unk>", "▁" becomes a space. An id out of range is an error.
  std::string decode(const std::vector<int64_t>& ids) const;
  // One piece per id (attention-plot axes).
  std::vector<std::string> labels(const std::vector<int64_t>& ids) const;

  // SentencePiece's serialized model: the bytes save() writes.
  const std::string& serialized() const;
  // 16 hex digits (FNV-1a of serialized()): two vocabularies with equal fingerprints encode
  // alike. A model folder can record it to recognise a vocabulary file of another model.
  std::string fingerprint() const;

  bool operator==(const SentencePieceVocab& other) const { return serialized() == other.serialized(); }

 private:
  struct Impl;
  explicit SentencePieceVocab(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn::io
