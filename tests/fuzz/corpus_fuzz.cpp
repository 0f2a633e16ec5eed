// tests/fuzz/corpus_fuzz.cpp — the training corpus readers on arbitrary files: the streaming
// reader (train/corpus_stream.h: LineChunkReader's blocks, CorpusStream's chunks, batches and
// positions), the in-memory text reader (train/text_data.h) and TSV reader (train/tasks.h).
// Input: one control byte (format, tokenization, block and chunk sizes), then the file.
// Properties: LineChunkReader gives split_lines' lines whatever the block size, and a seek to
// a line's offset continues there; a stream's epoch hands out num_batches() batches of valid
// examples, and a stream restarted from an exported position hands out the same rest.
#include <sstream>

#include "attn/io/lines.h"
#include "attn/train/corpus_stream.h"
#include "attn/train/tasks.h"
#include "attn/train/text_data.h"
#include "fuzz_util.h"

using namespace attn;

namespace {

// The batches left in the current epoch, each as its examples.
std::vector<std::vector<io::Example>> drain(train::CorpusStream& s) {
  std::vector<std::vector<io::Example>> out;
  while (s.has_next()) {
    const std::vector<int64_t> batch = s.next();
    ATTN_FUZZ_ASSERT(!batch.empty());
    std::vector<io::Example> examples;
    for (int64_t i : batch) {
      ATTN_FUZZ_ASSERT(i >= 0 && i < static_cast<int64_t>(s.examples().size()));
      const io::Example& e = s.examples()[static_cast<size_t>(i)];
      for (int64_t id : e.src) ATTN_FUZZ_ASSERT(id >= 0 && id < s.vocab().size());
      for (int64_t id : e.tgt) ATTN_FUZZ_ASSERT(id >= 0 && id < s.vocab().size());
      examples.push_back(e);
    }
    out.push_back(std::move(examples));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string path = fuzz::write_scratch("corpus.txt", text);
  const int64_t block = 1 + (control & 7);           // 1..8 bytes per read: many block boundaries
  const bool tsv = (control & 8) != 0;
  const io::Tokenization tok = (control & 16) ? io::Tokenization::Whitespace : io::Tokenization::Chars;
  const int64_t chunk_lines = 1 + ((control >> 5) & 3);

  // The chunked reader against split_lines, then resumed at every line's offset.
  const std::vector<io::NumberedLine> lines = io::split_lines(text);
  std::vector<int64_t> offsets;
  {
    train::LineChunkReader reader(path, block);
    std::string line;
    size_t k = 0;
    offsets.push_back(reader.offset());
    while (reader.next(line)) {
      ATTN_FUZZ_ASSERT(k < lines.size() && lines[k].text == line && reader.line_number() == lines[k].number);
      ATTN_FUZZ_ASSERT(reader.max_buffered() <= static_cast<int64_t>(text.size()) + block);
      offsets.push_back(reader.offset());
      ++k;
    }
    ATTN_FUZZ_ASSERT(k == lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      reader.seek(offsets[i], static_cast<int64_t>(i));
      ATTN_FUZZ_ASSERT(reader.next(line) && line == lines[i].text && reader.line_number() == lines[i].number);
    }
  }

  // The in-memory readers.
  try {
    if (tsv) {
      const train::TsvFile file = train::read_tsv(path, tok);
      const io::Vocab vocab = train::build_vocab(file, tok);
      (void)train::encode_tsv(file, vocab, false);
    } else {
      const train::TextFile file = train::read_text(path, tok);
      const io::Vocab vocab = train::build_text_vocab(file, tok, (control & 128) != 0);
      const auto ids = train::encode_text(file, vocab, false);
      (void)train::pack_blocks(ids, chunk_lines + 1, io::Vocab::kEos);
    }
  } catch (const Error&) {
  }

  // The stream: one epoch, then the same epoch again from a position exported half-way.
  train::StreamOptions o;
  o.path = path;
  o.format = tsv ? train::CorpusFormat::Tsv : train::CorpusFormat::Text;
  o.arch = tsv ? models::Arch::EncoderDecoder
               : ((control & 128) ? models::Arch::EncoderOnly : models::Arch::DecoderOnly);
  o.tokenization = tok;
  o.chunk_lines = chunk_lines;
  o.chunk_bytes = (control & 64) ? 7 : 0;
  o.max_length = (control & 64) ? 12 : 0;
  o.batching.batch_size = 2;
  o.batching.group_by_length = (control & 1) != 0;
  o.batching.seed = control;
  o.read_block = block;
  std::optional<train::CorpusStream> stream;
  try {
    stream.emplace(o);
  } catch (const Error&) {
    return 0;
  }
  const std::vector<std::vector<io::Example>> all = drain(*stream);
  ATTN_FUZZ_ASSERT(static_cast<int64_t>(all.size()) == stream->num_batches());
  stream->next_epoch();
  const size_t half = all.size() / 2;
  std::vector<std::vector<io::Example>> first;
  for (size_t i = 0; i < half && stream->has_next(); ++i) {
    std::vector<io::Example> b;
    for (int64_t j : stream->next()) b.push_back(stream->examples()[static_cast<size_t>(j)]);
    first.push_back(std::move(b));
  }
  const nlohmann::json pos = stream->position_json();
  const std::vector<std::vector<io::Example>> rest = drain(*stream);
  train::CorpusStream again(o);
  again.set_position_json(pos);
  ATTN_FUZZ_ASSERT(drain(again) == rest);
  return 0;
}
