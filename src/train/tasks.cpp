// Synthetic sequence tasks (reverse / copy / sort) and the TSV parallel-corpus loader.
// The reverse task is the seed's proof that training works (SPEC "Training"): reverse 8
// random digits. Everything is drawn from attn::Rng, so one seed gives the same data on
// every platform. Not here: batching and padding (batching.cpp).
#include "attn/train/tasks.h"

#include <algorithm>
#include <set>

#include "attn/core/error.h"
#include "attn/io/tsv.h"

namespace attn::train {

uint64_t stream_seed(uint64_t seed, uint64_t stream) {
  // splitmix64 finaliser of seed + (stream + 1) * golden ratio: distinct streams of one seed,
  // and distinct seeds of one stream, land far apart.
  uint64_t z = seed + (stream + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// ---- synthetic tasks ----------------------------------------------------------------------

const char* task_kind_name(TaskKind kind) {
  switch (kind) {
    case TaskKind::Reverse: return "reverse";
    case TaskKind::Copy: return "copy";
    case TaskKind::Sort: return "sort";
  }
  return "?";
}

TaskKind parse_task_kind(const std::string& name) {
  for (TaskKind k : {TaskKind::Reverse, TaskKind::Copy, TaskKind::Sort})
    if (name == task_kind_name(k)) return k;
  fail("task", "unknown task '", name, "' (expected reverse, copy or sort)");
}

void validate(const TaskConfig& c) {
  ATTN_CHECK(c.length >= 1, "task", "length must be >= 1, got ", c.length);
  ATTN_CHECK(c.min_length >= 0 && c.min_length <= c.length, "task", "min_length must be in [0, length = ",
             c.length, "], got ", c.min_length);
  ATTN_CHECK(c.n_symbols >= 1 && c.n_symbols <= kTaskAlphabetSize, "task", "n_symbols must be in [1, ",
             kTaskAlphabetSize, "], got ", c.n_symbols);
}

io::Vocab task_vocab(const TaskConfig& config) {
  validate(config);
  std::vector<std::string> symbols;
  for (int64_t k = 0; k < config.n_symbols; ++k) symbols.emplace_back(1, kTaskAlphabet[k]);
  return io::Vocab(symbols, io::Tokenization::Chars);
}

std::vector<int64_t> task_target(TaskKind kind, const std::vector<int64_t>& src) {
  std::vector<int64_t> tgt = src;
  switch (kind) {
    case TaskKind::Reverse: std::reverse(tgt.begin(), tgt.end()); break;
    case TaskKind::Copy: break;
    case TaskKind::Sort: std::sort(tgt.begin(), tgt.end()); break;
  }
  return tgt;
}

io::Example make_task_example(const TaskConfig& config, Rng& rng) {
  validate(config);
  int64_t len = config.length;
  if (config.min_length > 0 && config.min_length < config.length)
    len = config.min_length +
          static_cast<int64_t>(rng.below(static_cast<uint64_t>(config.length - config.min_length + 1)));
  io::Example ex;
  ex.src.resize(static_cast<size_t>(len));
  for (auto& id : ex.src)
    id = io::Vocab::kNumSpecial + static_cast<int64_t>(rng.below(static_cast<uint64_t>(config.n_symbols)));
  ex.tgt = task_target(config.kind, ex.src);
  return ex;
}

std::vector<io::Example> make_task_examples(const TaskConfig& config, int64_t count, Rng& rng) {
  ATTN_CHECK(count >= 0, "task", "example count must be >= 0, got ", count);
  std::vector<io::Example> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(make_task_example(config, rng));
  return out;
}

Dataset make_task_dataset(const TaskConfig& config, int64_t n_train, int64_t n_valid, uint64_t seed) {
  Dataset d;
  d.vocab = task_vocab(config);
  Rng train_rng(stream_seed(seed, 0));
  Rng valid_rng(stream_seed(seed, 1));
  d.train = make_task_examples(config, n_train, train_rng);
  d.valid = make_task_examples(config, n_valid, valid_rng);
  return d;
}

// ---- TSV parallel corpus -------------------------------------------------------------------

TsvFile read_tsv(const std::string& path, io::Tokenization tokenization) {
  const io::TsvLines lines = io::read_tsv_lines(path, "tsv");  // the one rule for bad lines
  TsvFile f;
  f.path = path;
  f.empty_lines = lines.empty_lines;
  for (const io::TsvLine& line : lines.pairs) {
    std::vector<std::string> src = io::tokenize(line.source, tokenization);
    std::vector<std::string> tgt = io::tokenize(line.target, tokenization);
    ATTN_CHECK(!src.empty(), "tsv", "'", path, "' line ", line.number, ": empty source side");
    ATTN_CHECK(!tgt.empty(), "tsv", "'", path, "' line ", line.number, ": empty target side");
    f.src.push_back(std::move(src));
    f.tgt.push_back(std::move(tgt));
    f.line_numbers.push_back(line.number);
  }
  return f;
}

io::Vocab build_vocab(const TsvFile& file, io::Tokenization tokenization) {
  std::set<std::string> symbols;  // bytewise order
  for (const auto* side : {&file.src, &file.tgt})
    for (const auto& tokens : *side) symbols.insert(tokens.begin(), tokens.end());
  io::Vocab v(tokenization);
  for (const std::string& s : symbols) {
    try {
      v.add(s);
    } catch (const Error& e) {
      fail("tsv", "'", file.path, "': ", e.what());
    }
  }
  return v;
}

std::vector<io::Example> encode_tsv(const TsvFile& file, const io::Vocab& vocab, bool map_unknown,
                                    int64_t* unknown_tokens) {
  std::vector<io::Example> out;
  out.reserve(file.src.size());
  int64_t unknown = 0;
  for (size_t i = 0; i < file.src.size(); ++i) {
    io::Example ex;
    for (auto [tokens, ids] : {std::pair{&file.src[i], &ex.src}, std::pair{&file.tgt[i], &ex.tgt}}) {
      if (vocab.sentencepiece()) {  // one token per side: its text, split by the model
        for (const std::string& t : *tokens)
          for (int64_t id : vocab.encode(t)) {
            unknown += id == io::Vocab::kUnk;
            ids->push_back(id);
          }
        continue;
      }
      for (const std::string& t : *tokens) {
        if (!vocab.contains(t)) {
          ATTN_CHECK(map_unknown, "tsv", "'", file.path, "' line ", file.line_numbers[i], ": unknown token '",
                     t, "'");
          ++unknown;
        }
        ids->push_back(vocab.id(t, true));
      }
    }
    out.push_back(std::move(ex));
  }
  if (unknown_tokens) *unknown_tokens = unknown;
  return out;
}

io::Vocab load_given_vocab(io::Tokenization tokenization, const std::string& vocab_path) {
  ATTN_CHECK(tokenization == io::Tokenization::SentencePiece, "vocab", "a vocabulary file ('", vocab_path,
             "') needs tokens 'sentencepiece', not '", io::tokenization_name(tokenization), "'");
  ATTN_CHECK(!vocab_path.empty(), "vocab", "tokens 'sentencepiece' need a SentencePiece model (attn vocab train)");
  return io::Vocab::load_sentencepiece(vocab_path);
}

Dataset load_tsv_dataset(const std::string& train_path, const std::string& valid_path,
                         io::Tokenization tokenization, const std::string& vocab_path) {
  const TsvFile train = read_tsv(train_path, tokenization);
  ATTN_CHECK(!train.src.empty(), "tsv", "'", train_path, "' holds no source<TAB>target pair");
  Dataset d;
  const bool given = tokenization == io::Tokenization::SentencePiece || !vocab_path.empty();
  d.vocab = given ? load_given_vocab(tokenization, vocab_path) : build_vocab(train, tokenization);
  d.train = encode_tsv(train, d.vocab, given, &d.train_unknown_tokens);
  d.empty_lines = train.empty_lines;
  if (!valid_path.empty()) {
    const TsvFile valid = read_tsv(valid_path, tokenization);
    d.valid = encode_tsv(valid, d.vocab, true, &d.valid_unknown_tokens);
    d.empty_lines += valid.empty_lines;
  }
  return d;
}

}  // namespace attn::train
