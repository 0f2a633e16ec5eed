// attn/train/tasks.h — training data: the synthetic sequence tasks (reverse, the seed's
// check that training works, plus copy and sort) and a loader for a tab-separated parallel
// corpus ("source<TAB>target" per line) with a vocabulary built from the training file.
// Examples hold symbol ids only; <bos>/<eos>/<pad> are added by make_batch (batching.h).
// The vocabulary is a SentencePiece model instead when one is given (tokens 'sentencepiece').
// Not here: corpus filtering or deduplication, streaming of files larger than memory (corpus_stream.h does that).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/core/rng.h"
#include "attn/io/example.h"
#include "attn/io/vocab.h"

namespace attn::train {

// A vocabulary with its training and validation examples.
struct Dataset {
  io::Vocab vocab;
  std::vector<io::Example> train;
  std::vector<io::Example> valid;
  // TSV corpora: empty lines skipped in the two files, and validation tokens that were
  // not in the training vocabulary (mapped to <unk>).
  int64_t empty_lines = 0;
  int64_t valid_unknown_tokens = 0;
  // A given (SentencePiece) vocabulary: training characters it lacks, read as <unk>.
  int64_t train_unknown_tokens = 0;
};

// A seed mixed with a stream number (splitmix64), so that one user seed gives independent
// generators for independent purposes (training data, validation data, batch order, ...).
uint64_t stream_seed(uint64_t seed, uint64_t stream);

// ---- synthetic tasks ------------------------------------------------------------------

enum class TaskKind {
  Reverse,  // target = source reversed (the seed's task: 8 digits)
  Copy,     // target = source
  Sort,     // target = source sorted ascending by symbol order
};
// "reverse", "copy", "sort"; parsing any other name is an error listing these.
const char* task_kind_name(TaskKind kind);
TaskKind parse_task_kind(const std::string& name);

// Symbols of the synthetic tasks, in order: "0".."9", then "a".."z", then "A".."Z".
inline constexpr const char* kTaskAlphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
inline constexpr int64_t kTaskAlphabetSize = 62;

struct TaskConfig {
  TaskKind kind = TaskKind::Reverse;
  int64_t length = 8;      // symbols per source sequence (>= 1)
  int64_t min_length = 0;  // 0: every source has `length` symbols; else a length uniform
                           // in [min_length, length] is drawn first
  int64_t n_symbols = 10;  // symbols drawn uniformly from the first n_symbols of kTaskAlphabet (1..62)
};

// The seed's dataset: 10,000 training and 1,000 validation examples from seed kTaskSeed.
inline constexpr uint64_t kTaskSeed = 1706;  // arXiv 1706.03762
inline constexpr int64_t kTaskTrainSize = 10000;
inline constexpr int64_t kTaskValidSize = 1000;

// Checks the config; an invalid value is an error naming the field.
void validate(const TaskConfig& config);
// Chars vocabulary: the specials, then the config's n_symbols symbols (symbol k has id 4 + k).
io::Vocab task_vocab(const TaskConfig& config);
// The task's target for a source of symbol ids.
std::vector<int64_t> task_target(TaskKind kind, const std::vector<int64_t>& src);
// One example: the length (if variable) and then each symbol drawn from rng.
io::Example make_task_example(const TaskConfig& config, Rng& rng);
std::vector<io::Example> make_task_examples(const TaskConfig& config, int64_t count, Rng& rng);
// Training examples from Rng(stream_seed(seed, 0)), validation from Rng(stream_seed(seed, 1)):
// the two sets come from independent streams, so growing one never changes the other.
Dataset make_task_dataset(const TaskConfig& config = {}, int64_t n_train = kTaskTrainSize,
                          int64_t n_valid = kTaskValidSize, uint64_t seed = kTaskSeed);

// ---- tab-separated parallel corpus ------------------------------------------------------

// One file split into tokens. Lines are "source<TAB>target"; a trailing "\r" (CRLF) and a
// UTF-8 byte-order mark at the start of the file are dropped; empty lines are skipped and
// counted. A line without a tab or with more than one, a side with no tokens, or invalid
// UTF-8 is an error "[tsv] '<path>' line <n>: ...".
struct TsvFile {
  std::string path;
  std::vector<std::vector<std::string>> src, tgt;  // tokens, one entry per pair
  std::vector<int64_t> line_numbers;               // 1-based line of each pair
  int64_t empty_lines = 0;
};
TsvFile read_tsv(const std::string& path, io::Tokenization tokenization);
// A vocabulary shared by source and target: the specials, then every token of the file
// sorted by its UTF-8 bytes (deterministic, independent of line order).
io::Vocab build_vocab(const TsvFile& file, io::Tokenization tokenization);
// The file's pairs as ids; unknown tokens are an error naming path and line, or <unk> when
// map_unknown (then counted in *unknown_tokens when given). With a SentencePiece vocabulary
// (the file read with io::Tokenization::SentencePiece: one token per side) each side is encoded by
// the model, characters it lacks become <unk> and are counted whatever map_unknown says.
std::vector<io::Example> encode_tsv(const TsvFile& file, const io::Vocab& vocab, bool map_unknown,
                                    int64_t* unknown_tokens = nullptr);
// Training pairs with the vocabulary built from them, and validation pairs (valid_path may
// be empty: no validation set) with unknown tokens mapped to <unk>. A training file
// without any pair is an error. With tokenization SentencePiece the vocabulary is the model at
// vocab_path (a file or a folder holding sentencepiece.model), shared by source and target.
Dataset load_tsv_dataset(const std::string& train_path, const std::string& valid_path,
                         io::Tokenization tokenization, const std::string& vocab_path = "");
// The vocabulary of vocab_path for `tokenization` (which must be SentencePiece; an empty path
// or another tokenization is an error).
io::Vocab load_given_vocab(io::Tokenization tokenization, const std::string& vocab_path);

}  // namespace attn::train
