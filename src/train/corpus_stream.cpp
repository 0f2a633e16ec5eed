// Streamed training corpora (see corpus_stream.h), paper §5.1: the file is read one chunk of
// lines at a time, a chunk is tokenized and planned into length-grouped batches exactly as an
// in-memory dataset (BatchIterator), and the chunk order is shuffled per epoch. The counting
// pass keeps only the chunk boundaries (three integers per chunk) and the vocabulary's symbols,
// so memory is bounded by one chunk plus one read block whatever the file's size.
// Not here: the training loop (trainer.cpp) or validation data (in memory).
#include "attn/train/corpus_stream.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "attn/core/error.h"
#include "attn/io/tsv.h"
#include "attn/train/text_data.h"

namespace attn::train {

namespace {

constexpr const char* kOp = "stream";
constexpr const char* kBom = "\xEF\xBB\xBF";

bool is_blank(const std::string& line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\v' && c != '\f' && c != '\r' && c != '\n') return false;
  return true;
}

void fnv_mix(uint64_t& h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
}

// Fisher-Yates with rng.below, as batching.cpp shuffles (portable bit for bit).
void shuffle_in_place(std::vector<int64_t>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

uint64_t chunk_seed(uint64_t seed, int64_t epoch, int64_t chunk) {
  return stream_seed(stream_seed(seed, static_cast<uint64_t>(epoch)), 1 + static_cast<uint64_t>(chunk));
}

int64_t json_int(const nlohmann::json& j, const char* key, int64_t min) {
  ATTN_CHECK(j.contains(key) && j[key].is_number_integer(), "StreamPosition", "missing integer \"", key, "\"");
  const int64_t v = j[key].get<int64_t>();
  ATTN_CHECK(v >= min, "StreamPosition", "\"", key, "\" must be >= ", min, ", got ", v);
  return v;
}

}  // namespace

// ---- LineChunkReader ----------------------------------------------------------------------

LineChunkReader::LineChunkReader(const std::string& path, int64_t block_bytes)
    : path_(path), in_(path, std::ios::binary), block_bytes_(block_bytes) {
  ATTN_CHECK(block_bytes >= 1, kOp, "the read block must be at least 1 byte, got ", block_bytes);
  ATTN_CHECK(in_.good(), kOp, "cannot read '", path, "'");
  in_.seekg(0, std::ios::end);
  file_size_ = static_cast<int64_t>(in_.tellg());
  seek(0, 0);
}

void LineChunkReader::seek(int64_t offset, int64_t lines_before) {
  ATTN_CHECK(offset >= 0 && offset <= file_size_, kOp, "'", path_, "': offset ", offset, " is outside the file (",
             file_size_, " bytes)");
  in_.clear();
  in_.seekg(offset);
  buffer_.clear();
  pos_ = 0;
  buffer_offset_ = offset;
  line_number_ = lines_before;
  eof_ = false;
  if (offset == 0) {
    while (buffer_.size() < 3 && fill()) {
    }
    if (buffer_.compare(0, 3, kBom) == 0) pos_ = 3;
  }
}

bool LineChunkReader::fill() {
  if (eof_) return false;
  if (pos_ > 0) {  // drop what was handed out: the buffer keeps the current line and one block
    buffer_.erase(0, pos_);
    buffer_offset_ += static_cast<int64_t>(pos_);
    pos_ = 0;
  }
  const size_t old = buffer_.size();
  buffer_.resize(old + static_cast<size_t>(block_bytes_));
  in_.read(buffer_.data() + old, block_bytes_);
  const auto got = static_cast<size_t>(in_.gcount());
  buffer_.resize(old + got);
  if (got < static_cast<size_t>(block_bytes_)) eof_ = true;
  max_buffered_ = std::max(max_buffered_, static_cast<int64_t>(buffer_.size()));
  return got > 0;
}

bool LineChunkReader::next(std::string& line) {
  size_t from = pos_;
  for (;;) {
    const size_t nl = buffer_.find('\n', from);
    if (nl != std::string::npos) {
      line.assign(buffer_, pos_, nl - pos_);
      pos_ = nl + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      ++line_number_;
      return true;
    }
    const size_t searched = buffer_.size() - pos_;
    if (!fill()) {
      if (pos_ >= buffer_.size()) return false;
      line.assign(buffer_, pos_, std::string::npos);  // the last line, without "\n"
      pos_ = buffer_.size();
      if (!line.empty() && line.back() == '\r') line.pop_back();
      ++line_number_;
      return true;
    }
    from = pos_ + searched;
  }
}

// ---- StreamPosition -----------------------------------------------------------------------

nlohmann::json StreamPosition::to_json() const {
  return nlohmann::json{{"kind", "stream"},
                        {"epoch", epoch},
                        {"chunk", chunk},
                        {"offset", offset},
                        {"index", index},
                        {"taken", taken},
                        {"rng", {rng.s[0], rng.s[1], rng.s[2], rng.s[3]}},
                        {"file_size", file_size},
                        {"fingerprint", fingerprint}};
}

StreamPosition StreamPosition::from_json(const nlohmann::json& j) {
  const char* op = "StreamPosition";
  ATTN_CHECK(j.is_object() && j.value("kind", "") == "stream", op,
             "not the position of a streamed corpus (was the run trained in memory?)");
  StreamPosition p;
  p.epoch = json_int(j, "epoch", 0);
  p.chunk = json_int(j, "chunk", -1);
  p.offset = json_int(j, "offset", 0);
  p.index = json_int(j, "index", 0);
  p.taken = json_int(j, "taken", 0);
  p.file_size = json_int(j, "file_size", 0);
  ATTN_CHECK(j.contains("rng") && j["rng"].is_array() && j["rng"].size() == 4, op,
             "\"rng\" must be an array of 4 unsigned integers");
  for (size_t i = 0; i < 4; ++i) {
    ATTN_CHECK(j["rng"][i].is_number_unsigned(), op, "\"rng\" must be an array of 4 unsigned integers");
    p.rng.s[i] = j["rng"][i].get<uint64_t>();
  }
  ATTN_CHECK(j.contains("fingerprint") && j["fingerprint"].is_number_unsigned(), op,
             "missing unsigned integer \"fingerprint\"");
  p.fingerprint = j["fingerprint"].get<uint64_t>();
  return p;
}

bool StreamPosition::operator==(const StreamPosition& o) const {
  return epoch == o.epoch && chunk == o.chunk && offset == o.offset && index == o.index && taken == o.taken &&
         file_size == o.file_size && fingerprint == o.fingerprint &&
         std::equal(std::begin(rng.s), std::end(rng.s), std::begin(o.rng.s));
}

// ---- CorpusStream -------------------------------------------------------------------------

CorpusStream::CorpusStream(StreamOptions options, std::optional<io::Vocab> vocab)
    : options_(std::move(options)), reader_(options_.path, options_.read_block) {
  const StreamOptions& o = options_;
  ATTN_CHECK(o.chunk_lines >= 1, kOp, "chunk_lines must be at least 1, got ", o.chunk_lines);
  ATTN_CHECK(o.chunk_bytes >= 0, kOp, "chunk_bytes must not be negative (0 = lines only), got ", o.chunk_bytes);
  ATTN_CHECK(o.max_length >= 0 && o.max_cost >= 0, kOp, "max_length and max_cost must not be negative, got ",
             o.max_length, " and ", o.max_cost);
  ATTN_CHECK(o.batching.batch_size >= 0 && o.batching.max_tokens >= 0 && o.batching.bucket_size >= 0, kOp,
             "negative batching option");
  ATTN_CHECK(o.batching.batch_size > 0 || o.batching.max_tokens > 0, kOp,
             "batch_size and max_tokens are both 0 (set at least one)");
  if (o.format == CorpusFormat::Tsv)
    ATTN_CHECK(o.arch == models::Arch::EncoderDecoder, kOp, "a TSV corpus trains encoder_decoder models");
  else
    ATTN_CHECK(o.arch != models::Arch::EncoderDecoder, kOp,
               "a text corpus trains decoder_only or encoder_only models, not encoder_decoder");
  const bool with_mask = o.arch == models::Arch::EncoderOnly;
  if (vocab) {
    ATTN_CHECK(!with_mask || vocab->has_mask(), kOp, "the given vocabulary has no ", io::Vocab::kMaskToken,
               " token, which the masked LM (encoder_only) needs");
    vocab_ = std::move(*vocab);
  } else {
    vocab_ = io::Vocab(o.tokenization, with_mask);
  }
  scan(!vocab.has_value());
  start_epoch(Rng(stream_seed(o.batching.seed, 0)).state());
}

bool CorpusStream::parse_line(const std::string& line, int64_t line_no, Sides& sides) const {
  const std::string& path = options_.path;
  const io::Tokenization tok = vocab_.tokenization();
  if (options_.format == CorpusFormat::Text) {
    if (is_blank(line)) return false;
    const int64_t bad = io::utf8_error_offset(line);
    ATTN_CHECK(bad < 0, "text", "'", path, "' line ", line_no, ": invalid UTF-8 at byte ", bad + 1, " of the line");
    sides.src = line;
    sides.src_tokens = io::tokenize(line, tok);
    sides.tgt.clear();
    sides.tgt_tokens.clear();
    return true;
  }
  // TSV: the rule of io/tsv.h, as read_tsv (tasks.h) applies it; an empty line is refused as the
  // in-memory trainer refuses it (in a parallel corpus it is most often a lost sentence).
  ATTN_CHECK(!line.empty(), "tsv", "'", path, "' line ", line_no,
             " is empty (every line must be source<TAB>target)");
  const io::TsvFields fields = io::split_tsv_line(line, line_no, "tsv", "'" + path + "'");
  sides.src = fields.source;
  sides.tgt = fields.target;
  sides.src_tokens = io::tokenize(sides.src, tok);
  sides.tgt_tokens = io::tokenize(sides.tgt, tok);
  ATTN_CHECK(!sides.src_tokens.empty(), "tsv", "'", path, "' line ", line_no, ": empty source side");
  ATTN_CHECK(!sides.tgt_tokens.empty(), "tsv", "'", path, "' line ", line_no, ": empty target side");
  return true;
}

io::Example CorpusStream::encode(const Sides& sides, int64_t* unknown) const {
  const bool subwords = vocab_.sentencepiece() != nullptr;
  auto ids = [&](const std::string& text, const std::vector<std::string>& tokens) {
    std::vector<int64_t> out;
    if (subwords) {  // the model splits the text; what it lacks is <unk>
      out = vocab_.encode(text, true);
      if (unknown) *unknown += std::count(out.begin(), out.end(), io::Vocab::kUnk);
      return out;
    }
    out.reserve(tokens.size());
    for (const std::string& t : tokens) {
      if (unknown && !vocab_.contains(t)) ++*unknown;
      out.push_back(vocab_.id(t, true));
    }
    return out;
  };
  if (options_.format == CorpusFormat::Text) return text_example(options_.arch, ids(sides.src, sides.src_tokens));
  return io::Example{ids(sides.src, sides.src_tokens), ids(sides.tgt, sides.tgt_tokens)};
}

bool CorpusStream::too_long(const io::Example& e) const {
  const int64_t L = options_.max_length;
  if (L > 0 && (static_cast<int64_t>(e.src.size()) > L || static_cast<int64_t>(e.tgt.size()) > L)) return true;
  const int64_t cost = example_tokens(e);
  if (options_.max_cost > 0 && cost > options_.max_cost) return true;
  return options_.batching.max_tokens > 0 && cost > options_.batching.max_tokens;
}

void CorpusStream::scan(bool build_vocab) {
  const StreamOptions& o = options_;
  LineChunkReader r(o.path, o.read_block);
  std::set<std::string> symbols;  // bytewise order, as the in-memory vocabularies
  uint64_t h = 1469598103934665603ull;
  Chunk cur;
  int64_t cur_bytes = 0;
  // The current chunk's examples, for counting its batches: each of the real example's lengths,
  // its ids <unk> while the vocabulary is still being built (batch planning reads only lengths).
  std::vector<io::Example> shapes;
  auto close_chunk = [&] {
    if (cur.lines == 0) return;
    if (!shapes.empty()) {
      BatchingOptions b = o.batching;
      b.seed = chunk_seed(o.batching.seed, 0, static_cast<int64_t>(chunks_.size()));
      stats_.batches += BatchIterator(shapes, b).num_batches();
    }
    chunks_.push_back(cur);
    cur = Chunk{};
    cur_bytes = 0;
    shapes.clear();
  };
  std::string line;
  Sides sides;
  for (;;) {
    const int64_t at = r.offset();
    if (!r.next(line)) break;
    if (cur.lines == 0) {
      cur.offset = at;
      cur.lines_before = r.line_number() - 1;
    }
    ++cur.lines;
    cur_bytes += r.offset() - at;
    fnv_mix(h, line.data(), line.size());
    fnv_mix(h, "\n", 1);
    if (parse_line(line, r.line_number(), sides)) {
      io::Example shape;  // only its lengths matter here
      if (build_vocab) {
        symbols.insert(sides.src_tokens.begin(), sides.src_tokens.end());
        symbols.insert(sides.tgt_tokens.begin(), sides.tgt_tokens.end());
        if (o.format == CorpusFormat::Text) {
          shape = text_example(o.arch, std::vector<int64_t>(sides.src_tokens.size(), io::Vocab::kUnk));
        } else {
          shape.src.assign(sides.src_tokens.size(), io::Vocab::kUnk);
          shape.tgt.assign(sides.tgt_tokens.size(), io::Vocab::kUnk);
        }
      } else {
        shape = encode(sides, &stats_.unknown_tokens);
      }
      if (too_long(shape)) {
        ++stats_.skipped_long;
      } else {
        ++stats_.examples;
        stats_.longest = std::max(stats_.longest, example_tokens(shape));
        shapes.push_back(std::move(shape));
      }
    } else {
      ++stats_.blank_lines;
    }
    if (cur.lines >= o.chunk_lines || (o.chunk_bytes > 0 && cur_bytes >= o.chunk_bytes)) close_chunk();
  }
  close_chunk();
  stats_.lines = r.line_number();
  stats_.chunks = static_cast<int64_t>(chunks_.size());
  stats_.file_size = r.file_size();
  stats_.fingerprint = h;
  ATTN_CHECK(stats_.examples > 0, kOp, "'", o.path, "' holds no example to train on (", stats_.lines, " lines, ",
             stats_.blank_lines, " blank, ", stats_.skipped_long, " too long skipped)");
  if (build_vocab)
    for (const std::string& s : symbols) {
      try {
        vocab_.add(s);
      } catch (const Error& e) {
        fail(kOp, "'", o.path, "': ", e.what());
      }
    }
}

void CorpusStream::start_epoch(const Rng::State& state) {
  epoch_state_ = state;
  Rng rng;
  rng.set_state(state);
  order_.resize(chunks_.size());
  std::iota(order_.begin(), order_.end(), int64_t{0});
  shuffle_in_place(order_, rng);
  current_ = -1;
  examples_.clear();
  plan_.clear();
  index_ = 0;
  taken_ = 0;
}

void CorpusStream::load_chunk(int64_t k) {
  const int64_t c = order_[static_cast<size_t>(k)];
  const Chunk& ch = chunks_[static_cast<size_t>(c)];
  reader_.seek(ch.offset, ch.lines_before);
  examples_.clear();
  plan_.clear();
  index_ = 0;
  current_ = k;
  std::string line;
  Sides sides;
  for (int64_t i = 0; i < ch.lines; ++i) {
    ATTN_CHECK(reader_.next(line), kOp, "'", options_.path, "' ended at line ", reader_.line_number(),
               ", before the ", ch.lines_before + ch.lines, " lines it held when training began (the file changed)");
    if (!parse_line(line, reader_.line_number(), sides)) continue;
    io::Example e = encode(sides, nullptr);
    if (!too_long(e)) examples_.push_back(std::move(e));
  }
  if (examples_.empty()) return;
  BatchingOptions b = options_.batching;
  b.seed = chunk_seed(options_.batching.seed, epoch_, c);
  plan_ = BatchIterator(examples_, b).plan();
}

bool CorpusStream::has_next() {
  while (index_ >= static_cast<int64_t>(plan_.size())) {
    if (current_ + 1 >= static_cast<int64_t>(order_.size())) return false;
    load_chunk(current_ + 1);
  }
  return true;
}

std::vector<int64_t> CorpusStream::next() {
  ATTN_CHECK(has_next(), kOp, "epoch ", epoch_, " has no batch left");
  ++taken_;
  return plan_[static_cast<size_t>(index_++)];
}

void CorpusStream::next_epoch() {
  ATTN_CHECK(!has_next(), kOp, "epoch ", epoch_, " still has batches");
  ++epoch_;
  start_epoch(Rng(stream_seed(options_.batching.seed, static_cast<uint64_t>(epoch_))).state());
}

int64_t CorpusStream::objective_epoch() const {
  return epoch_ * stats_.chunks + std::max<int64_t>(chunk_in_file(), 0);
}

StreamPosition CorpusStream::position() const {
  StreamPosition p;
  p.epoch = epoch_;
  p.chunk = current_;
  p.offset = current_ >= 0 ? chunks_[static_cast<size_t>(order_[static_cast<size_t>(current_)])].offset : 0;
  p.index = index_;
  p.taken = taken_;
  p.rng = epoch_state_;
  p.file_size = stats_.file_size;
  p.fingerprint = stats_.fingerprint;
  return p;
}

void CorpusStream::set_position(const StreamPosition& pos) {
  const char* op = "CorpusStream::set_position";
  ATTN_CHECK(pos.file_size == stats_.file_size && pos.fingerprint == stats_.fingerprint, op, "the corpus '",
             options_.path, "' changed since the position was saved (", pos.file_size, " bytes then, ",
             stats_.file_size, " now", pos.file_size == stats_.file_size ? ", other contents" : "", ")");
  ATTN_CHECK(pos.chunk < stats_.chunks, op, "chunk ", pos.chunk, " is past the ", stats_.chunks, " chunks of '",
             options_.path, "'");
  ATTN_CHECK(pos.chunk >= 0 || (pos.index == 0 && pos.taken == 0), op, "batches taken before the first chunk");
  // Replan on a copy first, so that a bad position leaves the stream unchanged.
  const int64_t saved_epoch = epoch_, saved_current = current_, saved_index = index_, saved_taken = taken_;
  const Rng::State saved_state = epoch_state_;
  auto restore = [&] {
    epoch_ = saved_epoch;
    start_epoch(saved_state);
    if (saved_current >= 0) load_chunk(saved_current);
    index_ = saved_index;
    taken_ = saved_taken;
  };
  epoch_ = pos.epoch;
  start_epoch(pos.rng);
  if (pos.chunk >= 0) {
    const int64_t offset = chunks_[static_cast<size_t>(order_[static_cast<size_t>(pos.chunk)])].offset;
    if (offset != pos.offset) {
      restore();
      fail(op, "chunk ", pos.chunk, " of epoch ", pos.epoch, " starts at byte ", offset, ", the position says ",
           pos.offset, " (another seed or chunk size)");
    }
    load_chunk(pos.chunk);
    if (pos.index > static_cast<int64_t>(plan_.size()) || pos.taken < pos.index) {
      const size_t planned = plan_.size();
      restore();
      fail(op, "index ", pos.index, " is past the ", planned, " batches of chunk ", pos.chunk, " (or taken ",
           pos.taken, " < index)");
    }
  }
  index_ = pos.index;
  taken_ = pos.taken;
}

}  // namespace attn::train
