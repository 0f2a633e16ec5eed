// Plain-text corpora for decoder-only and encoder-only training (see text_data.h): one
// sequence per non-blank line, a vocabulary sorted by bytes, and examples laid out so that the
// batching code serves both families (a target without a source, or a source without a target).
// pack_blocks concatenates lines into GPT-style blocks for decoder-only training.
// Not here: any normalisation of the text.
#include "attn/train/text_data.h"

#include <set>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/lines.h"

namespace attn::train {

namespace {

constexpr const char* kOp = "text";

bool is_blank(const std::string& line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\v' && c != '\f' && c != '\r' && c != '\n') return false;
  return true;
}

}  // namespace

TextFile read_text(const std::string& path, io::Tokenization tokenization) {
  const std::string text = io::read_file(path);
  TextFile f;
  f.path = path;
  for (const io::NumberedLine& numbered : io::split_lines(text)) {
    const std::string line(numbered.text);
    const int64_t line_no = numbered.number;
    if (is_blank(line)) {
      ++f.blank_lines;
      continue;
    }
    const int64_t bad = io::utf8_error_offset(line);
    ATTN_CHECK(bad < 0, kOp, "'", path, "' line ", line_no, ": invalid UTF-8 at byte ", bad + 1, " of the line");
    f.lines.push_back(io::tokenize(line, tokenization));
    f.line_numbers.push_back(line_no);
  }
  return f;
}

io::Vocab build_text_vocab(const TextFile& file, io::Tokenization tokenization, bool with_mask) {
  std::set<std::string> symbols;  // bytewise order
  for (const auto& tokens : file.lines) symbols.insert(tokens.begin(), tokens.end());
  io::Vocab v(tokenization, with_mask);
  for (const std::string& s : symbols) {
    try {
      v.add(s);
    } catch (const Error& e) {
      fail(kOp, "'", file.path, "': ", e.what());
    }
  }
  return v;
}

std::vector<std::vector<int64_t>> encode_text(const TextFile& file, const io::Vocab& vocab, bool map_unknown,
                                              int64_t* unknown_tokens) {
  std::vector<std::vector<int64_t>> out;
  out.reserve(file.lines.size());
  int64_t unknown = 0;
  for (size_t i = 0; i < file.lines.size(); ++i) {
    std::vector<int64_t> ids;
    ids.reserve(file.lines[i].size());
    if (vocab.sentencepiece()) {  // one token per line: its text, split by the model
      for (const std::string& t : file.lines[i])
        for (int64_t id : vocab.encode(t)) {
          unknown += id == io::Vocab::kUnk;
          ids.push_back(id);
        }
      out.push_back(std::move(ids));
      continue;
    }
    for (const std::string& t : file.lines[i]) {
      if (!vocab.contains(t)) {
        ATTN_CHECK(map_unknown, kOp, "'", file.path, "' line ", file.line_numbers[i], ": unknown token '", t, "'");
        ++unknown;
      }
      ids.push_back(vocab.id(t, true));
    }
    out.push_back(std::move(ids));
  }
  if (unknown_tokens) *unknown_tokens = unknown;
  return out;
}

io::Example text_example(models::Arch arch, std::vector<int64_t> ids) {
  io::Example ex;
  switch (arch) {
    case models::Arch::DecoderOnly: ex.tgt = std::move(ids); break;
    case models::Arch::EncoderOnly: ex.src = std::move(ids); break;
    case models::Arch::EncoderDecoder:
      fail(kOp, "a text corpus trains decoder_only or encoder_only models, not encoder_decoder");
  }
  return ex;
}

const std::vector<int64_t>& text_ids(const io::Example& example) {
  return example.src.empty() ? example.tgt : example.src;
}

std::vector<std::vector<int64_t>> pack_blocks(const std::vector<std::vector<int64_t>>& lines, int64_t block_ids,
                                              int64_t eos) {
  ATTN_CHECK(block_ids >= 1, kOp, "a packed block needs at least 1 id, got ", block_ids);
  ATTN_CHECK(eos >= 0, kOp, "packing needs an <eos> id, got ", eos);
  std::vector<std::vector<int64_t>> blocks;
  std::vector<int64_t> block;  // [<= block_ids]
  block.reserve(static_cast<size_t>(block_ids));
  const auto push = [&](int64_t id) {
    block.push_back(id);
    if (static_cast<int64_t>(block.size()) == block_ids) {
      blocks.push_back(std::move(block));
      block = {};
      block.reserve(static_cast<size_t>(block_ids));
    }
  };
  for (const std::vector<int64_t>& line : lines) {
    for (int64_t id : line) push(id);
    push(eos);
  }
  if (!block.empty()) blocks.push_back(std::move(block));  // the partial last block is kept
  return blocks;
}

Dataset load_text_dataset(const std::string& train_path, const std::string& valid_path, io::Tokenization tokenization,
                          models::Arch arch, const std::string& vocab_path, int64_t pack) {
  ATTN_CHECK(arch != models::Arch::EncoderDecoder, kOp,
             "a text corpus trains decoder_only or encoder_only models, not encoder_decoder");
  ATTN_CHECK(pack == 0 || arch == models::Arch::DecoderOnly, kOp,
             "packing into blocks (pack) is for decoder_only models, not ", models::arch_name(arch));
  ATTN_CHECK(pack == 0 || pack >= 2, kOp, "pack must be 0 (one example per line) or at least 2 (<bos> and one token), got ",
             pack);
  // Every line's ids become one example, or the lines are packed into blocks of pack - 1 ids.
  const auto examples = [&](std::vector<std::vector<int64_t>> lines) {
    if (pack > 0) lines = pack_blocks(lines, pack - 1, io::Vocab::kEos);
    std::vector<io::Example> out;
    out.reserve(lines.size());
    for (auto& ids : lines) out.push_back(text_example(arch, std::move(ids)));
    return out;
  };
  const TextFile train = read_text(train_path, tokenization);
  ATTN_CHECK(!train.lines.empty(), kOp, "'", train_path, "' holds no text (every line is empty or blank)");
  Dataset d;
  const bool given = tokenization == io::Tokenization::SentencePiece || !vocab_path.empty();
  if (given) {
    d.vocab = load_given_vocab(tokenization, vocab_path);
    ATTN_CHECK(arch != models::Arch::EncoderOnly || d.vocab.has_mask(), kOp, "the SentencePiece model '", vocab_path,
               "' has no ", io::Vocab::kMaskToken, " piece at id ", io::Vocab::kMask,
               ", which the encoder-only objective needs (train it with `attn vocab train --mask`)");
  } else {
    d.vocab = build_text_vocab(train, tokenization, arch == models::Arch::EncoderOnly);
  }
  d.train = examples(encode_text(train, d.vocab, given, &d.train_unknown_tokens));
  d.empty_lines = train.blank_lines;
  if (!valid_path.empty()) {
    const TextFile valid = read_text(valid_path, tokenization);
    ATTN_CHECK(!valid.lines.empty(), kOp, "'", valid_path, "' holds no text (every line is empty or blank)");
    d.valid = examples(encode_text(valid, d.vocab, true, &d.valid_unknown_tokens));
    d.empty_lines += valid.blank_lines;
  }
  return d;
}

}  // namespace attn::train
