// GPT-style block packing of text (train/text_data.h pack_blocks, load_text_dataset with pack,
// TrainConfig's pack key): blocks cut the concatenation of the lines with <eos> after each line,
// a block boundary falls anywhere (inside a line or on an <eos>), the short last block is kept,
// counts against a brute-force loop, the validation text packed the same way, and invalid
// settings (a block of no ids, an encoder-only or streamed run, a block longer than the
// learned positions) are errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/train/text_data.h"
#include "attn/train/train_config.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::train {
namespace {

using Ids = std::vector<int64_t>;
using models::Arch;
using models::test_util::TempDir;

constexpr int64_t kE = io::Vocab::kEos;

TEST(PackBlocks, ConcatenatesLinesWithEosAndCutsFixedBlocks) {
  const std::vector<Ids> lines = {{10, 11, 12}, {13}, {14, 15, 16, 17}};
  // 10 11 12 E 13 E 14 15 16 17 E: 11 ids.
  const auto blocks = pack_blocks(lines, 4, kE);
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0], (Ids{10, 11, 12, kE}));  // a boundary right after an <eos>
  EXPECT_EQ(blocks[1], (Ids{13, kE, 14, 15}));  // a line cut across two blocks
  EXPECT_EQ(blocks[2], (Ids{16, 17, kE}));      // the short last block is kept
}

TEST(PackBlocks, ExactMultipleLeavesNoPartialBlock) {
  const auto blocks = pack_blocks({{5, 6, 7}, {8, 9, 10}}, 4, kE);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0], (Ids{5, 6, 7, kE}));
  EXPECT_EQ(blocks[1], (Ids{8, 9, 10, kE}));
  const auto ones = pack_blocks({{5, 6}}, 1, kE);
  EXPECT_EQ(ones, (std::vector<Ids>{{5}, {6}, {kE}}));
}

TEST(PackBlocks, CountsAndContentMatchABruteForceConcatenation) {
  std::vector<Ids> lines;
  for (int64_t i = 0; i < 23; ++i) lines.push_back(Ids(static_cast<size_t>(1 + (i * 7) % 9), 5 + i));
  Ids flat;
  for (const Ids& l : lines) {
    flat.insert(flat.end(), l.begin(), l.end());
    flat.push_back(kE);
  }
  for (int64_t n : {1, 2, 3, 7, 16, 500}) {
    const auto blocks = pack_blocks(lines, n, kE);
    const int64_t total = static_cast<int64_t>(flat.size());
    EXPECT_EQ(static_cast<int64_t>(blocks.size()), (total + n - 1) / n) << n;
    Ids joined;
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (b + 1 < blocks.size()) {
        EXPECT_EQ(static_cast<int64_t>(blocks[b].size()), n) << n;
      }
      EXPECT_FALSE(blocks[b].empty());
      joined.insert(joined.end(), blocks[b].begin(), blocks[b].end());
    }
    EXPECT_EQ(joined, flat) << n;
  }
  EXPECT_TRUE(pack_blocks({}, 4, kE).empty());
}

TEST(PackBlocks, BlockOfNoIdsOrMissingEosIsAnError) {
  EXPECT_THROW(pack_blocks({{5}}, 0, kE), Error);
  EXPECT_THROW(pack_blocks({{5}}, -3, kE), Error);
  EXPECT_THROW(pack_blocks({{5}}, 2, -1), Error);
}

TEST(TextDataset, PackedDecoderOnlyBlocksHoldPackMinusOneIdsInBothFiles) {
  TempDir tmp("attn_text_pack");
  io::write_file_atomic(tmp.file("t.txt"), "abc\n\nb\ncab\n");
  io::write_file_atomic(tmp.file("v.txt"), "ba\nc\n");
  const Dataset d = load_text_dataset(tmp.file("t.txt"), tmp.file("v.txt"), io::Tokenization::Chars, Arch::DecoderOnly,
                                      "", 4);
  const int64_t a = d.vocab.id("a"), b = d.vocab.id("b"), c = d.vocab.id("c");
  // a b c E b E c a b E -> blocks of 3 ids (rows of 4 with <bos>).
  ASSERT_EQ(d.train.size(), 4u);
  EXPECT_EQ(d.train[0].tgt, (Ids{a, b, c}));
  EXPECT_EQ(d.train[1].tgt, (Ids{kE, b, kE}));
  EXPECT_EQ(d.train[2].tgt, (Ids{c, a, b}));
  EXPECT_EQ(d.train[3].tgt, (Ids{kE}));
  for (const io::Example& e : d.train) EXPECT_TRUE(e.src.empty());
  EXPECT_EQ(d.empty_lines, 1);
  // b a E c E -> 2 blocks.
  ASSERT_EQ(d.valid.size(), 2u);
  EXPECT_EQ(d.valid[0].tgt, (Ids{b, a, kE}));
  EXPECT_EQ(d.valid[1].tgt, (Ids{c, kE}));
  // pack 0: one example per line, as before.
  EXPECT_EQ(load_text_dataset(tmp.file("t.txt"), "", io::Tokenization::Chars, Arch::DecoderOnly).train.size(), 3u);
}

TEST(TextDataset, PackingAnEncoderOnlyTextOrBelowTwoIsAnError) {
  TempDir tmp("attn_text_pack");
  io::write_file_atomic(tmp.file("t.txt"), "abc\n");
  EXPECT_THROW(load_text_dataset(tmp.file("t.txt"), "", io::Tokenization::Chars, Arch::EncoderOnly, "", 4), Error);
  EXPECT_THROW(load_text_dataset(tmp.file("t.txt"), "", io::Tokenization::Chars, Arch::DecoderOnly, "", 1), Error);
  EXPECT_THROW(load_text_dataset(tmp.file("t.txt"), "", io::Tokenization::Chars, Arch::DecoderOnly, "", -2), Error);
}

TrainConfig packed_config() {
  TrainConfig c;
  c.task = "";
  c.text_path = "t.txt";
  c.model.arch = Arch::DecoderOnly;
  c.pack = 16;
  return c;
}

TEST(TrainConfigPack, ValidForADecoderOnlyTextAndSurvivesJson) {
  const TrainConfig c = packed_config();
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(TrainConfig::from_json(c.to_json()).pack, 16);
  EXPECT_EQ(TrainConfig::from_json(nlohmann::json::object()).pack, 0);
}

TEST(TrainConfigPack, InvalidCombinationsAreErrors) {
  TrainConfig small = packed_config();
  small.pack = 1;
  EXPECT_THROW(small.validate(), Error);
  TrainConfig encoder = packed_config();
  encoder.model.arch = Arch::EncoderOnly;
  encoder.model.n_encoder_layers = 2;
  EXPECT_THROW(encoder.validate(), Error);
  TrainConfig task;  // the reverse task with the encoder-decoder
  task.pack = 16;
  EXPECT_THROW(task.validate(), Error);
  TrainConfig streamed = packed_config();
  streamed.stream = true;
  EXPECT_THROW(streamed.validate(), Error);
  TrainConfig learned = packed_config();
  learned.model.positional = nn::PositionalKind::Learned;
  learned.model.max_len = 8;
  EXPECT_THROW(learned.validate(), Error);
  learned.pack = 8;
  EXPECT_NO_THROW(learned.validate());
}

}  // namespace
}  // namespace attn::train
