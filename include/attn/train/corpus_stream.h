// attn/train/corpus_stream.h — training corpora larger than memory: a TSV parallel file or a
// plain-text file read in chunks of lines, each chunk tokenized, shuffled and cut into batches
// by the in-memory rules (batching.h: length buckets, max_tokens), with the chunk order drawn
// anew every epoch. A first, counting pass over the file checks every line, builds the
// vocabulary (unless one is given), finds the chunk boundaries and the number of batches per
// epoch; the position (epoch, chunk, its file offset, batches taken, generator state) travels
// in the checkpoint so that a resumed run continues exactly. Paper §5.1 (batching by length).
// Not here: validation sets (small, read in memory), subword training, memory-mapped files.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn/core/rng.h"
#include "attn/models/config.h"
#include "attn/train/batching.h"
#include "attn/train/tasks.h"
#include "attn/io/vocab.h"

namespace attn::train {

// The lines of a file read in blocks of `block_bytes`, by the rules of io::split_lines (a UTF-8
// byte-order mark at offset 0 dropped, "\n" ends a line, a "\r" before it dropped, a last line
// without "\n" counted), holding at most one block plus the line being read.
class LineChunkReader {
 public:
  // Opens `path` (an error naming it when it cannot be read) at offset 0.
  explicit LineChunkReader(const std::string& path, int64_t block_bytes = 1 << 16);
  // The next line is the one starting at byte `offset`, numbered `lines_before` + 1.
  void seek(int64_t offset, int64_t lines_before);
  // The next line into `line`; false at the end of the file.
  bool next(std::string& line);
  int64_t offset() const { return buffer_offset_ + static_cast<int64_t>(pos_); }  // of the next line
  int64_t line_number() const { return line_number_; }                              // of the last line read
  int64_t file_size() const { return file_size_; }
  // The most bytes the reader has held at once (memory-bound tests).
  int64_t max_buffered() const { return max_buffered_; }

 private:
  bool fill();  // reads one more block; false at the end of the file
  std::string path_;
  std::ifstream in_;
  int64_t block_bytes_;
  int64_t file_size_ = 0;
  std::string buffer_;
  size_t pos_ = 0;
  int64_t buffer_offset_ = 0;  // file offset of buffer_[0]
  int64_t line_number_ = 0;
  int64_t max_buffered_ = 0;
  bool eof_ = false;
};

enum class CorpusFormat {
  Tsv,   // "source<TAB>target" per line, every line a pair (an empty line is an error)
  Text,  // one sequence per non-blank line (blank lines skipped and counted)
};

struct StreamOptions {
  std::string path;
  CorpusFormat format = CorpusFormat::Tsv;
  models::Arch arch = models::Arch::EncoderDecoder;  // Text: decoder_only or encoder_only
  io::Tokenization tokenization = io::Tokenization::Chars;
  int64_t chunk_lines = 100000;  // lines per chunk (>= 1)
  int64_t chunk_bytes = 0;       // also end a chunk once it holds this many bytes (0: lines only)
  // Examples skipped (and counted) instead of trained on: a side longer than max_length tokens
  // (0: no limit), or a cost (example_tokens) above max_cost (0: no limit; the trainer sets it
  // to max_tokens and, with learned positions, to the model's max_len).
  int64_t max_length = 0;
  int64_t max_cost = 0;
  BatchingOptions batching;  // batch_size, max_tokens, group_by_length, bucket_size, seed
  int64_t read_block = 1 << 16;  // bytes per read
};

// What the counting pass found (the same every epoch).
struct StreamStats {
  int64_t lines = 0;          // lines of the file
  int64_t examples = 0;       // examples trained on per epoch
  int64_t blank_lines = 0;    // Text: blank lines skipped
  int64_t skipped_long = 0;   // examples skipped for max_length / max_cost
  int64_t longest = 0;        // the longest example trained on (example_tokens)
  int64_t unknown_tokens = 0; // tokens not in a given vocabulary (read as <unk>)
  int64_t chunks = 0;
  int64_t batches = 0;        // batches of epoch 1 (later epochs: the same when the count does
                              // not depend on the order, see CorpusStream::num_batches)
  int64_t file_size = 0;
  uint64_t fingerprint = 0;   // FNV-1a of the lines and their numbers: detects a changed file
};

// A position in a stream: exported after any batch, imported to continue exactly.
struct StreamPosition {
  int64_t epoch = 0;
  int64_t chunk = 0;        // chunks begun in this epoch, minus one (the k-th of the epoch's order)
  int64_t offset = 0;       // file offset of that chunk (checked on import)
  int64_t index = 0;        // batches of that chunk handed out
  int64_t taken = 0;        // batches of the epoch handed out
  Rng::State rng{};         // the epoch's generator when its chunk order was drawn
  int64_t file_size = 0;    // checked on import
  uint64_t fingerprint = 0; // checked on import
  nlohmann::json to_json() const;
  static StreamPosition from_json(const nlohmann::json& j);
  bool operator==(const StreamPosition& o) const;
};

// The stream over one file. Epoch e draws its chunk order from Rng(stream_seed(seed, e)) and
// plans chunk c with a BatchIterator seeded stream_seed(stream_seed(seed, e), 1 + c): the
// order within each chunk and the order of the chunks both change per epoch and are the same
// for the same seed. Only the current chunk's examples are held in memory.
class CorpusStream : public BatchSource {
 public:
  // Runs the counting pass. Without `vocab`, builds the vocabulary as the in-memory loaders do
  // (every token sorted by bytes; [MASK] for encoder_only); with one (its tokenization is used,
  // a SentencePiece model encodes each side), tokens it lacks are read as <unk> and counted. Errors: the in-memory readers' (a TSV line without a tab or with two,
  // an empty side, invalid UTF-8, naming path and line), an empty TSV line, a file without any
  // usable example, an invalid option.
  CorpusStream(StreamOptions options, std::optional<io::Vocab> vocab = std::nullopt);

  const io::Vocab& vocab() const { return vocab_; }
  const StreamStats& stats() const { return stats_; }
  const StreamOptions& options() const { return options_; }

  int64_t epoch() const override { return epoch_; }
  int64_t index() const override { return taken_; }
  // Epoch 1's batch count (exact), used for every epoch: with group_by_length over whole chunks
  // (bucket_size 0) it is exact for all; otherwise later epochs may differ by a few batches.
  int64_t num_batches() const override { return stats_.batches; }
  bool has_next() override;
  std::vector<int64_t> next() override;
  void next_epoch() override;
  const std::vector<io::Example>& examples() const override { return examples_; }
  // epoch * chunks + chunk: distinct for every chunk of every epoch (the masked LM's masks).
  int64_t objective_epoch() const override;
  nlohmann::json position_json() const override { return position().to_json(); }
  void set_position_json(const nlohmann::json& j) override { set_position(StreamPosition::from_json(j)); }

  StreamPosition position() const;
  // Errors: a position of another file (size or fingerprint differ: the file changed), or past
  // the end of its epoch or chunk; the stream is left unchanged then.
  void set_position(const StreamPosition& pos);

  // The current chunk (-1 before the first) in file order, and the reader's largest buffer.
  int64_t chunk_in_file() const { return current_ < 0 ? -1 : order_[static_cast<size_t>(current_)]; }
  int64_t max_buffered() const { return reader_.max_buffered(); }

 private:
  struct Chunk {
    int64_t offset = 0, lines_before = 0, lines = 0;
  };
  void scan(bool build_vocab);
  void start_epoch(const Rng::State& state);
  void load_chunk(int64_t k);  // the k-th chunk of this epoch's order
  // A line's sides as text and as tokens (Text: the line in src).
  struct Sides {
    std::string src, tgt;
    std::vector<std::string> src_tokens, tgt_tokens;
  };
  // One line checked and split; false for a line that yields no example (a blank text line).
  bool parse_line(const std::string& line, int64_t line_no, Sides& sides) const;
  bool too_long(const io::Example& e) const;
  // The example of a parsed line; tokens the vocabulary lacks become <unk>, counted in *unknown.
  io::Example encode(const Sides& sides, int64_t* unknown) const;

  StreamOptions options_;
  io::Vocab vocab_;
  StreamStats stats_;
  std::vector<Chunk> chunks_;
  LineChunkReader reader_;
  int64_t epoch_ = 0;
  Rng::State epoch_state_{};
  std::vector<int64_t> order_;  // this epoch's chunk order
  int64_t current_ = -1;        // position in order_ of the loaded chunk
  std::vector<io::Example> examples_;
  std::vector<std::vector<int64_t>> plan_;
  int64_t index_ = 0;  // batches of the chunk handed out
  int64_t taken_ = 0;  // batches of the epoch handed out
};

}  // namespace attn::train
