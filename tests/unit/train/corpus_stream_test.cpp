// CorpusStream and LineChunkReader (streamed corpora, paper §5.1 batching): lines read in tiny
// blocks equal io::split_lines on every awkward file (a line across a read boundary, CRLF, a
// byte-order mark, no final newline, empty lines); every example is seen exactly once per
// epoch; orders are deterministic per seed and differ across epochs; long examples are skipped
// and counted; a given SentencePiece vocabulary encodes as in memory; a position resumes
// exactly; a changed file is refused; memory stays at one chunk and one block; and streamed
// Trainers (encoder-decoder, masked LM) resumed mid-epoch repeat the uninterrupted run bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/sentencepiece_vocab.h"
#include "attn/io/lines.h"
#include "attn/train/checkpointing.h"
#include "attn/train/corpus_stream.h"
#include "attn/train/text_data.h"
#include "attn/train/trainer.h"
#include "unit/models/broken_checkpoints.h"
#include "unit/train/tiny_runs.h"

namespace attn::train {
namespace {

using models::test_util::TempDir;

std::string write(const TempDir& tmp, const std::string& name, const std::string& text) {
  const std::string path = tmp.file(name);
  io::write_file_atomic(path, text);
  return path;
}

// n lines "w1 w2 ...<TAB>..." of varying lengths, deterministic.
std::string tsv_corpus(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const int len = 1 + (i * 7) % 9;
    std::string src, tgt;
    for (int k = 0; k < len; ++k) src += static_cast<char>('a' + (i + k) % 26);
    for (int k = 0; k < 1 + (i * 5) % 6; ++k) tgt += static_cast<char>('A' + (i * 3 + k) % 26);
    s += src + "\t" + tgt + "\n";
  }
  return s;
}

StreamOptions tsv_options(const std::string& path, int64_t chunk_lines) {
  StreamOptions o;
  o.path = path;
  o.chunk_lines = chunk_lines;
  o.batching.batch_size = 4;
  o.batching.group_by_length = true;
  o.batching.seed = 11;
  o.read_block = 5;  // far smaller than a line: every line crosses read boundaries
  return o;
}

// All batches of the stream's current epoch, as the examples they hold.
std::vector<std::vector<io::Example>> epoch_batches(CorpusStream& s) {
  std::vector<std::vector<io::Example>> out;
  while (s.has_next()) {
    const std::vector<int64_t> idx = s.next();
    std::vector<io::Example> b;
    for (int64_t k : idx) b.push_back(s.examples()[static_cast<size_t>(k)]);
    out.push_back(b);
  }
  return out;
}

std::vector<io::Example> flatten(const std::vector<std::vector<io::Example>>& batches) {
  std::vector<io::Example> out;
  for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

bool example_less(const io::Example& a, const io::Example& b) {
  return a.src != b.src ? a.src < b.src : a.tgt < b.tgt;
}

TEST(LineChunkReader, ReadsTheLinesOfSplitLinesWhateverTheBlockSize) {
  TempDir tmp("attn_stream");
  const std::vector<std::string> files = {
      "",
      "a",
      "a\n",
      "\n\n\n",
      "ab\ncd",
      "ab\r\ncd\r\n",
      "ab\r\ncd\r",
      "\xEF\xBB\xBFx\ny\n",
      "\xEF\xBB\xBF",
      "\xEF\xBB",
      "x\xEF\xBB\xBFy\n",  // a mark after the start is text
      "one\n\ntwo\r\n\r\nthree",
      std::string(40, 'q') + "\nshort\n" + std::string(23, 'r'),
  };
  for (const std::string& text : files) {
    const std::string path = write(tmp, "f.txt", text);
    const auto expected = io::split_lines(text);
    for (int64_t block = 1; block <= 9; ++block) {
      LineChunkReader r(path, block);
      std::string line;
      size_t i = 0;
      while (r.next(line)) {
        ASSERT_LT(i, expected.size()) << "block " << block << " file '" << text << "'";
        EXPECT_EQ(line, std::string(expected[i].text)) << "block " << block << " line " << i + 1;
        EXPECT_EQ(r.line_number(), expected[i].number);
        ++i;
      }
      EXPECT_EQ(i, expected.size()) << "block " << block << " file '" << text << "'";
      EXPECT_EQ(r.offset(), static_cast<int64_t>(text.size()));
    }
  }
}

TEST(LineChunkReader, SeeksToALineAndHoldsOneBlockPlusTheLongestLine) {
  TempDir tmp("attn_stream");
  std::string text;
  for (int i = 0; i < 300; ++i) text += "line " + std::to_string(i) + (i % 50 == 0 ? std::string(60, 'x') : "") + "\n";
  const std::string path = write(tmp, "f.txt", text);
  LineChunkReader r(path, 16);
  std::string line;
  int64_t offset_of_100 = 0;
  size_t longest = 0;
  while (r.next(line)) {
    longest = std::max(longest, line.size() + 1);
    if (r.line_number() == 99) offset_of_100 = r.offset();
  }
  EXPECT_LE(r.max_buffered(), static_cast<int64_t>(longest) + 16);
  r.seek(offset_of_100, 99);
  ASSERT_TRUE(r.next(line));
  EXPECT_EQ(line, "line 99");
  EXPECT_EQ(r.line_number(), 100);
  EXPECT_THROW(r.seek(static_cast<int64_t>(text.size()) + 1, 0), Error);
  EXPECT_THROW(LineChunkReader(tmp.file("missing.txt")), Error);
  EXPECT_THROW(LineChunkReader(path, 0), Error);
}

TEST(CorpusStream, SeesEveryExampleOncePerEpochWithTheInMemoryVocabulary) {
  TempDir tmp("attn_stream");
  const std::string path = write(tmp, "train.tsv", tsv_corpus(61));
  CorpusStream s(tsv_options(path, 7));
  const Dataset mem = load_tsv_dataset(path, "", io::Tokenization::Chars);
  EXPECT_EQ(s.vocab(), mem.vocab);
  EXPECT_EQ(s.stats().lines, 61);
  EXPECT_EQ(s.stats().examples, 61);
  EXPECT_EQ(s.stats().chunks, 9);  // 8 of 7 lines and one of 5
  std::vector<io::Example> expected = mem.train;
  std::sort(expected.begin(), expected.end(), example_less);
  for (int epoch = 0; epoch < 3; ++epoch) {
    ASSERT_EQ(s.epoch(), epoch);
    const auto batches = epoch_batches(s);
    EXPECT_EQ(static_cast<int64_t>(batches.size()), s.num_batches()) << "epoch " << epoch;
    EXPECT_EQ(s.index(), s.num_batches());
    for (const auto& b : batches) EXPECT_LE(b.size(), 4u);
    std::vector<io::Example> seen = flatten(batches);
    std::sort(seen.begin(), seen.end(), example_less);
    EXPECT_EQ(seen, expected) << "epoch " << epoch;
    s.next_epoch();
  }
}

TEST(CorpusStream, OrderIsTheSameForASeedAndDiffersAcrossEpochsAndSeeds) {
  TempDir tmp("attn_stream");
  const std::string path = write(tmp, "train.tsv", tsv_corpus(80));
  CorpusStream a(tsv_options(path, 10)), b(tsv_options(path, 10));
  StreamOptions other = tsv_options(path, 10);
  other.batching.seed = 12;
  CorpusStream c(other);
  const auto a0 = flatten(epoch_batches(a));
  EXPECT_EQ(a0, flatten(epoch_batches(b)));
  EXPECT_NE(a0, flatten(epoch_batches(c)));
  a.next_epoch();
  b.next_epoch();
  const auto a1 = flatten(epoch_batches(a));
  EXPECT_NE(a0, a1);
  EXPECT_EQ(a1, flatten(epoch_batches(b)));
}

TEST(CorpusStream, SkipsAndCountsExamplesLongerThanTheLimits) {
  TempDir tmp("attn_stream");
  const std::string path = write(tmp, "train.tsv", "abc\txy\nabcdefgh\tx\nab\tabcdefg\na\tb\n");
  StreamOptions o = tsv_options(path, 2);
  o.max_length = 5;
  CorpusStream s(o);
  EXPECT_EQ(s.stats().skipped_long, 2);
  EXPECT_EQ(s.stats().examples, 2);
  const auto seen = flatten(epoch_batches(s));
  ASSERT_EQ(seen.size(), 2u);
  for (const io::Example& e : seen) EXPECT_LE(std::max(e.src.size(), e.tgt.size()), 5u);
  // max_tokens: an example costing more than a batch may hold is skipped, not an error.
  StreamOptions t = tsv_options(path, 2);
  t.batching.max_tokens = 4;
  EXPECT_EQ(CorpusStream(t).stats().skipped_long, 2);  // "abcdefgh" costs 8, "ab\tabcdefg" 8
  StreamOptions all = tsv_options(path, 2);
  all.max_length = 0;
  all.max_cost = 1;
  EXPECT_THROW(CorpusStream{all}, Error);  // nothing left to train on
}

TEST(CorpusStream, ReadsTextWithBlankLinesCrlfAndAByteOrderMark) {
  TempDir tmp("attn_stream");
  const std::string path = write(tmp, "train.txt", "\xEF\xBB\xBFhello\r\n\r\n  \nworld\nhi");
  StreamOptions o;
  o.path = path;
  o.format = CorpusFormat::Text;
  o.arch = models::Arch::DecoderOnly;
  o.chunk_lines = 2;
  o.read_block = 3;
  o.batching.batch_size = 8;
  CorpusStream s(o);
  const Dataset mem = load_text_dataset(path, "", io::Tokenization::Chars, models::Arch::DecoderOnly);
  EXPECT_EQ(s.vocab(), mem.vocab);
  EXPECT_EQ(s.stats().blank_lines, 2);
  EXPECT_EQ(s.stats().examples, 3);
  std::vector<io::Example> seen = flatten(epoch_batches(s)), expected = mem.train;
  std::sort(seen.begin(), seen.end(), example_less);
  std::sort(expected.begin(), expected.end(), example_less);
  EXPECT_EQ(seen, expected);
  for (const io::Example& e : seen) EXPECT_TRUE(e.src.empty());  // decoder-only: the line is the target
  // Encoder-only: the vocabulary has [MASK]; the line is the source.
  o.arch = models::Arch::EncoderOnly;
  CorpusStream m(o);
  EXPECT_TRUE(m.vocab().has_mask());
  for (const io::Example& e : flatten(epoch_batches(m))) EXPECT_TRUE(e.tgt.empty());
}

TEST(CorpusStream, BadLinesAreErrorsNamingPathAndLine) {
  TempDir tmp("attn_stream");
  auto message = [&](const std::string& text) {
    const std::string path = write(tmp, "bad.tsv", text);
    try {
      CorpusStream s(tsv_options(path, 2));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("a\tb\nc\td\nno tab here\n").find("line 3: no tab"), std::string::npos);
  EXPECT_NE(message("a\tb\tc\n").find("more than one tab"), std::string::npos);
  EXPECT_NE(message("a\tb\n\nc\td\n").find("line 2 is empty"), std::string::npos);
  EXPECT_NE(message("a\t\n").find("empty target side"), std::string::npos);
  EXPECT_NE(message("a\tb\n\xFF\tc\n").find("line 2: invalid UTF-8"), std::string::npos);
  EXPECT_NE(message("").find("no example"), std::string::npos);
  // Options.
  const std::string good = write(tmp, "good.tsv", "a\tb\n");
  StreamOptions o = tsv_options(good, 0);
  EXPECT_THROW(CorpusStream{o}, Error);
  o = tsv_options(good, 1);
  o.arch = models::Arch::DecoderOnly;  // a TSV corpus trains the encoder-decoder
  EXPECT_THROW(CorpusStream{o}, Error);
  o = tsv_options(good, 1);
  o.batching.batch_size = 0;
  EXPECT_THROW(CorpusStream{o}, Error);
  o = tsv_options(tmp.file("missing.tsv"), 1);
  EXPECT_THROW(CorpusStream{o}, Error);
}

TEST(CorpusStream, AGivenVocabularyReadsUnknownTokensAsUnkAndCountsThem) {
  TempDir tmp("attn_stream");
  const std::string path = write(tmp, "train.tsv", "ab\tba\ncd\tdc\n");
  io::Vocab v(std::vector<std::string>{"a", "b"}, io::Tokenization::Chars);
  CorpusStream s(tsv_options(path, 10), v);
  EXPECT_EQ(s.vocab(), v);
  EXPECT_EQ(s.stats().unknown_tokens, 4);
  int64_t unk = 0;
  for (const io::Example& e : flatten(epoch_batches(s)))
    for (const auto* side : {&e.src, &e.tgt}) unk += std::count(side->begin(), side->end(), io::Vocab::kUnk);
  EXPECT_EQ(unk, 4);
}

TEST(CorpusStream, ASentencePieceVocabularyEncodesEachSideAsTheInMemoryLoaderDoes) {
  TempDir tmp("attn_stream");
  std::string text, pairs;
  const char* words[] = {"the", "cat", "sat", "on", "mat", "dog", "ran", "far"};
  for (int i = 0; i < 60; ++i) {
    const std::string a = std::string(words[i % 8]) + " " + words[(i * 3) % 8];
    const std::string b = std::string(words[(i * 5) % 8]) + " " + words[(i + 1) % 8] + " " + words[i % 3];
    text += a + "\n" + b + "\n";
    pairs += a + "\t" + b + "\n";
  }
  io::SentencePieceTrainOptions o;
  o.inputs = {write(tmp, "corpus.txt", text)};
  o.vocab_size = 20;
  io::SentencePieceVocab::train(o).save(tmp.file("sp.model"));
  const std::string path = write(tmp, "train.tsv", pairs + "zzz\tthe\n");  // 'z' is not in the model
  const io::Vocab sp = io::Vocab::load_sentencepiece(tmp.file("sp.model"));
  StreamOptions so = tsv_options(path, 9);
  so.tokenization = io::Tokenization::SentencePiece;
  CorpusStream s(so, sp);
  const Dataset mem = load_tsv_dataset(path, "", io::Tokenization::SentencePiece, tmp.file("sp.model"));
  EXPECT_EQ(s.vocab(), mem.vocab);
  EXPECT_EQ(s.stats().unknown_tokens, mem.train_unknown_tokens);
  EXPECT_GT(s.stats().unknown_tokens, 0);
  std::vector<io::Example> seen = flatten(epoch_batches(s)), expected = mem.train;
  std::sort(seen.begin(), seen.end(), example_less);
  std::sort(expected.begin(), expected.end(), example_less);
  EXPECT_EQ(seen, expected);
}

TEST(CorpusStream, HoldsOneChunkAtATime) {
  TempDir tmp("attn_stream");
  const std::string path = write(tmp, "train.tsv", tsv_corpus(200));
  StreamOptions o = tsv_options(path, 1000);
  o.chunk_bytes = 64;  // the byte cap ends chunks long before 1000 lines
  o.read_block = 32;
  CorpusStream s(o);
  EXPECT_GT(s.stats().chunks, 20);
  size_t most = 0;
  while (s.has_next()) {
    (void)s.next();
    most = std::max(most, s.examples().size());
  }
  EXPECT_LE(most, (64u + 17u) / 4);  // a chunk ends past 64 bytes; lines have 4 to 17 bytes
  EXPECT_LE(s.max_buffered(), 32 + 20);  // one block plus at most one line
}

TEST(CorpusStream, APositionContinuesWithTheSameBatches) {
  TempDir tmp("attn_stream");
  const std::string path = write(tmp, "train.tsv", tsv_corpus(50));
  CorpusStream whole(tsv_options(path, 6));
  std::vector<std::vector<io::Example>> all;
  for (int e = 0; e < 2; ++e) {
    for (const auto& b : epoch_batches(whole)) all.push_back(b);
    whole.next_epoch();
  }
  for (size_t cut : {size_t{0}, size_t{1}, size_t{5}, all.size() / 2, all.size() / 2 + 3}) {
    CorpusStream first(tsv_options(path, 6));
    std::vector<std::vector<io::Example>> got;
    for (size_t i = 0; i < cut; ++i) {
      if (!first.has_next()) first.next_epoch();
      const auto idx = first.next();
      std::vector<io::Example> b;
      for (int64_t k : idx) b.push_back(first.examples()[static_cast<size_t>(k)]);
      got.push_back(b);
    }
    const nlohmann::json saved = first.position_json();
    EXPECT_EQ(StreamPosition::from_json(saved), first.position());
    CorpusStream second(tsv_options(path, 6));
    second.set_position_json(nlohmann::json::parse(saved.dump()));
    EXPECT_EQ(second.position(), first.position());
    while (got.size() < all.size()) {
      if (!second.has_next()) second.next_epoch();
      const auto idx = second.next();
      std::vector<io::Example> b;
      for (int64_t k : idx) b.push_back(second.examples()[static_cast<size_t>(k)]);
      got.push_back(b);
    }
    EXPECT_EQ(got, all) << "cut after " << cut;
  }
}

TEST(CorpusStream, APositionOfAChangedFileOrPastTheEndIsRefused) {
  TempDir tmp("attn_stream");
  const std::string path = write(tmp, "train.tsv", tsv_corpus(30));
  CorpusStream s(tsv_options(path, 4));
  (void)s.next();
  (void)s.next();
  const StreamPosition pos = s.position();
  write(tmp, "train.tsv", tsv_corpus(29));  // shrank
  CorpusStream shrunk(tsv_options(path, 4));
  EXPECT_THROW(shrunk.set_position(pos), Error);
  std::string same_size = tsv_corpus(30);
  same_size[0] = same_size[0] == 'a' ? 'b' : 'a';  // the same size, other contents
  write(tmp, "train.tsv", same_size);
  CorpusStream edited(tsv_options(path, 4));
  try {
    edited.set_position(pos);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("changed"), std::string::npos) << e.what();
  }
  write(tmp, "train.tsv", tsv_corpus(30));
  CorpusStream back(tsv_options(path, 4));
  StreamPosition past = pos;
  past.index = 1000;
  past.taken = 1000;
  const StreamPosition before = back.position();
  EXPECT_THROW(back.set_position(past), Error);
  EXPECT_EQ(back.position(), before);  // unchanged
  StreamPosition other_chunk = pos;
  other_chunk.offset += 1;
  EXPECT_THROW(back.set_position(other_chunk), Error);
  EXPECT_THROW(StreamPosition::from_json(nlohmann::json{{"epoch", 0}, {"index", 0}}), Error);
  back.set_position(pos);
  EXPECT_EQ(back.position(), pos);
}

// A tiny streamed run (2 epochs, checkpoints every 3 steps, dropout on).
TrainConfig stream_config() {
  TrainConfig c;
  c.task = "";
  c.stream = true;
  c.chunk_lines = 20;
  test_util::make_tiny(c.model);
  c.epochs = 2;
  c.batch_size = 4;
  c.schedule = ScheduleKind::Cosine;  // needs the batch count of an epoch
  c.lr = 0.01;
  c.warmup = 2;
  c.threads = 1;
  c.seed = 5;
  c.checkpoint_every = 3;
  return c;
}

// Trains `c` in one go, and again stopped (with a checkpoint) inside a chunk of the second epoch
// and resumed from the folder: the losses after the checkpoint, the metrics and the final
// weights are identical.
void expect_exact_stream_resume(const TrainConfig& c) {
  TempDir tmp("attn_stream");
  Trainer whole(c, tmp.file("whole"));
  ASSERT_NE(whole.stream(), nullptr);
  EXPECT_TRUE(whole.data().train.empty());
  whole.run();
  const std::vector<double> all = whole.step_losses();
  ASSERT_EQ(static_cast<int64_t>(all.size()), c.epochs * whole.stream()->num_batches());

  // The first step of epoch 2 after which the stream stands inside a chunk.
  CorpusStream sim(whole.stream()->options(), whole.data().vocab);
  int64_t step = 0, stop = 0;
  while (sim.has_next()) {
    (void)sim.next();
    ++step;
  }
  sim.next_epoch();
  while (stop == 0 && sim.has_next()) {
    (void)sim.next();
    ++step;
    if (sim.has_next() && sim.position().index > 0) stop = step;
  }
  ASSERT_GT(stop, 0);
  TrainConfig stopped = c;
  stopped.checkpoint_every = stop;
  const std::string dir = tmp.file("stopped");
  {
    Trainer first(stopped, dir);
    first.run(stop);
  }
  const int64_t from = latest_checkpoint(dir)->step;
  ASSERT_EQ(from, stop);
  ASSERT_NE(from % whole.stream()->num_batches(), 0);  // inside an epoch
  const auto state = nlohmann::json::parse(io::read_file(latest_checkpoint(dir)->path + "/state.json"));
  ASSERT_GT(state["position"]["index"].get<int64_t>(), 0) << state["position"].dump();  // inside a chunk
  auto resumed = Trainer::resume(dir);
  EXPECT_EQ(resumed->step(), from);
  resumed->run();
  EXPECT_EQ(resumed->step_losses(), std::vector<double>(all.begin() + from, all.end()));
  ASSERT_EQ(resumed->metrics().size(), whole.metrics().size());
  for (size_t i = 0; i < whole.metrics().size(); ++i)
    EXPECT_EQ(resumed->metrics()[i].loss, whole.metrics()[i].loss) << "epoch " << i + 1;
  auto wa = whole.model().named_parameters(), wb = resumed->model().named_parameters();
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_EQ(wa[i].second.to_vector<float>(), wb[i].second.to_vector<float>());
}

TEST(CorpusStream, AStreamedRunResumedInsideAnEpochRepeatsTheUninterruptedRunBitForBit) {
  TempDir tmp("attn_stream");
  TrainConfig c = stream_config();
  c.train_path = write(tmp, "train.tsv", tsv_corpus(40));
  c.max_length = 7;
  expect_exact_stream_resume(c);

  // The same data in memory: the same vocabulary, examples and skipped count.
  Trainer streamed(c, tmp.file("streamed"));
  EXPECT_GT(streamed.skipped_long(), 0);
  TrainConfig mem = c;
  mem.stream = false;
  Trainer in_memory(mem, tmp.file("mem"));
  EXPECT_EQ(in_memory.data().vocab, streamed.data().vocab);
  EXPECT_EQ(in_memory.skipped_long(), streamed.skipped_long());
  EXPECT_EQ(static_cast<int64_t>(in_memory.data().train.size()), streamed.stream()->stats().examples);
}

// The masked LM draws its masks per chunk and epoch: a resumed run masks the same way.
TEST(CorpusStream, AStreamedMaskedLmResumedInsideAnEpochRepeatsTheUninterruptedRunBitForBit) {
  TempDir tmp("attn_stream");
  std::string text;
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i * 37 % 101) + (i % 6 == 0 ? "\n\n" : "\n");
  TrainConfig c = stream_config();
  c.text_path = write(tmp, "train.txt", text);
  c.model.arch = models::Arch::EncoderOnly;
  expect_exact_stream_resume(c);
}

TEST(CorpusStream, ResumingAfterTheCorpusChangedIsAClearError) {
  TempDir tmp("attn_stream");
  const std::string data = write(tmp, "train.tsv", tsv_corpus(40));
  TrainConfig c;
  c.task = "";
  c.train_path = data;
  c.stream = true;
  c.chunk_lines = 8;
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_encoder_layers = 1;
  c.model.n_decoder_layers = 1;
  c.model.d_ff = 32;
  c.epochs = 1;
  c.batch_size = 8;
  c.threads = 1;
  const std::string dir = tmp.file("run");
  {
    Trainer t(c, dir);
    t.run(2);
    t.save_checkpoint();
  }
  std::string changed = tsv_corpus(40);
  changed[5] = changed[5] == 'c' ? 'd' : 'c';  // same vocabulary, same size, other pairs
  write(tmp, "train.tsv", changed);
  try {
    Trainer::resume(dir);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("changed"), std::string::npos) << e.what();
  }
}

TEST(CorpusStream, StreamOptionsInTheConfigAreValidated) {
  TrainConfig c;
  c.stream = true;  // with the synthetic task
  EXPECT_THROW(c.validate(), Error);
  c = TrainConfig{};
  c.chunk_lines = 0;
  EXPECT_THROW(c.validate(), Error);
  c = TrainConfig{};
  c.max_length = -1;
  EXPECT_THROW(c.validate(), Error);
  c = TrainConfig{};
  c.chunk_bytes = -1;
  EXPECT_THROW(c.validate(), Error);
  TrainConfig s;
  s.stream = true;
  s.chunk_lines = 7;
  s.chunk_bytes = 100;
  s.max_length = 30;
  EXPECT_EQ(TrainConfig::from_json(s.to_json()), s);
}

}  // namespace
}  // namespace attn::train
