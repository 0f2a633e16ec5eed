// SentencePiece (Kudo & Richardson, 2018) behind attn's vocabulary conventions: training reads
// the files itself (line endings, byte-order marks, empty and over-long lines handled and counted
// here, invalid UTF-8 an error), SentencePiece is configured so that <pad> <bos> <eos> <unk> get
// ids 0..3, and models made with other special ids are refused on load. Only the library's stable
// C++ API is used (no protobuf headers). Not here: sampling-based encodings, vocabulary merging.
#include "attn/io/sentencepiece_vocab.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"

namespace attn::io {

namespace {

namespace fs = std::filesystem;
namespace spm = sentencepiece;

constexpr const char* kSpecialPieces[SentencePieceVocab::kNumSpecial] = {"<pad>", "<bos>", "<eos>", "<unk>"};

// Byte offset of the first invalid UTF-8 sequence (RFC 3629), or -1.
int64_t invalid_utf8_at(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + len > s.size()) return static_cast<int64_t>(i);
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return static_cast<int64_t>(i);
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\v\f") == std::string::npos; }

// SentencePiece's messages start with the source location and the failed check
// ("Internal: ./src/x.cc(660) [a == b] Vocabulary size too high ..."): keep the words after it.
std::string spm_message(const spm::util::Status& st) {
  std::string m = st.ToString();
  const size_t close = m.find("] ");
  if (m.find("./src/") != std::string::npos && close != std::string::npos) m = m.substr(close + 2);
  return m;
}

// The training sentences, read line by line from every input file in turn. SentencePiece pulls
// them through this iterator; a problem in a later line stops it with an error status and is
// rethrown by train() with the file and line.
class FileSentences : public spm::SentenceIterator {
 public:
  FileSentences(const SentencePieceTrainOptions& o, SentencePieceTrainReport& report)
      : files_(o.inputs), max_bytes_(o.max_sentence_bytes), report_(report) {
    advance();
    if (!error_.empty()) throw Error(error_);
  }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  spm::util::Status status() const override {
    return error_.empty() ? spm::util::Status() : spm::util::Status(spm::util::StatusCode::kInternal, error_);
  }
  const std::string& error() const { return error_; }

 private:
  // Moves to the next usable line; sets done_ at the end of the last file or on an error.
  void advance() {
    while (true) {
      if (!in_.is_open()) {
        if (next_file_ == files_.size()) {
          done_ = true;
          return;
        }
        path_ = files_[next_file_++];
        line_no_ = 0;
        std::error_code ec;
        if (!fs::is_regular_file(path_, ec))
          return stop(str_cat("[vocab] cannot read input '", path_, "': not a file"));
        in_.open(path_, std::ios::binary);
        if (!in_) return stop(str_cat("[vocab] cannot read input '", path_, "'"));
      }
      if (!std::getline(in_, line_)) {
        if (in_.bad()) return stop(str_cat("[vocab] error reading '", path_, "' after line ", line_no_));
        in_.close();
        in_.clear();
        continue;
      }
      ++line_no_;
      ++report_.lines;
      if (line_no_ == 1 && line_.rfind("\xEF\xBB\xBF", 0) == 0) line_.erase(0, 3);  // byte-order mark
      if (!line_.empty() && line_.back() == '\r') {
        line_.pop_back();
        ++report_.crlf_lines;
      }
      const int64_t bad = invalid_utf8_at(line_);
      if (bad >= 0)
        return stop(str_cat("[vocab] '", path_, "' line ", line_no_, ": invalid UTF-8 at byte ", bad,
                            " (convert the file to UTF-8)"));
      if (blank(line_)) {
        ++report_.empty_lines;
        continue;
      }
      if (static_cast<int64_t>(line_.size()) > max_bytes_) {
        ++report_.long_lines;
        continue;
      }
      ++report_.sentences;
      return;
    }
  }
  void stop(std::string message) {
    error_ = std::move(message);
    done_ = true;
  }

  std::vector<std::string> files_;
  size_t next_file_ = 0;
  int64_t max_bytes_;
  SentencePieceTrainReport& report_;
  std::ifstream in_;
  std::string path_, line_, error_;
  int64_t line_no_ = 0;
  bool done_ = false;
};

std::string spm_bool(bool b) { return b ? "true" : "false"; }

}  // namespace

struct SentencePieceVocab::Impl {
  spm::SentencePieceProcessor proc;
  std::string bytes;
};

const char* subword_model_name(SubwordModel m) { return m == SubwordModel::Bpe ? "bpe" : "unigram"; }

SubwordModel parse_subword_model(const std::string& name) {
  if (name == "bpe") return SubwordModel::Bpe;
  if (name == "unigram") return SubwordModel::Unigram;
  fail("vocab", "unknown subword model '", name, "' (expected bpe or unigram)");
}

SentencePieceVocab::SentencePieceVocab(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceVocab::SentencePieceVocab(SentencePieceVocab&&) noexcept = default;
SentencePieceVocab& SentencePieceVocab::operator=(SentencePieceVocab&&) noexcept = default;
SentencePieceVocab::~SentencePieceVocab() = default;

SentencePieceVocab SentencePieceVocab::train(const SentencePieceTrainOptions& o, SentencePieceTrainReport* report) {
  ATTN_CHECK(!o.inputs.empty(), "vocab", "no input files");
  ATTN_CHECK(o.vocab_size > kNumSpecial, "vocab", "vocabulary size must be > ", kNumSpecial,
             " (the special tokens), got ", o.vocab_size);
  ATTN_CHECK(o.character_coverage > 0 && o.character_coverage <= 1, "vocab",
             "character coverage must be in (0, 1], got ", o.character_coverage);
  ATTN_CHECK(o.max_sentences >= 0, "vocab", "max sentences must be >= 0 (0: all), got ", o.max_sentences);
  ATTN_CHECK(o.max_sentence_bytes >= 1, "vocab", "max sentence bytes must be >= 1, got ", o.max_sentence_bytes);
  ATTN_CHECK(o.threads >= 1, "vocab", "threads must be >= 1, got ", o.threads);
  SentencePieceTrainReport local;
  SentencePieceTrainReport& r = report ? *report : local;
  r = {};
  FileSentences sentences(o, r);
  ATTN_CHECK(r.sentences > 0, "vocab", "the input files hold no usable line (", r.lines, " lines: ", r.empty_lines,
             " empty, ", r.long_lines, " longer than ", o.max_sentence_bytes, " bytes)");

  std::unordered_map<std::string, std::string> args = {
      {"model_type", subword_model_name(o.model)},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", str_cat(o.character_coverage)},
      {"normalization_rule_name", o.normalization},
      {"byte_fallback", spm_bool(o.byte_fallback)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", std::to_string(o.max_sentence_bytes)},
      {"num_threads", std::to_string(o.threads)},
      // attn's ids and names of the special tokens (io::Vocab), and "<unk>" in decoded text.
      {"pad_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"unk_id", "3"},
      {"pad_piece", kSpecialPieces[0]},
      {"bos_piece", kSpecialPieces[1]},
      {"eos_piece", kSpecialPieces[2]},
      {"unk_piece", kSpecialPieces[3]},
      {"unk_surface", kSpecialPieces[3]},
      {"minloglevel", "1"},  // no progress log on stderr
  };
  // User-defined pieces follow the control pieces, so [MASK] gets id 4, as in io::Vocab.
  if (o.mask_symbol) args["user_defined_symbols"] = kMaskPiece;
  spm::SetRandomGeneratorSeed(static_cast<unsigned int>(o.seed));
  std::string bytes;
  const spm::util::Status st = spm::SentencePieceTrainer::Train(args, &sentences, &bytes);
  if (!sentences.error().empty()) throw Error(sentences.error());
  ATTN_CHECK(st.ok(), "vocab", "SentencePiece training failed: ", spm_message(st));
  return from_serialized(std::move(bytes), "the trained model");
}

SentencePieceVocab SentencePieceVocab::from_serialized(std::string bytes, const std::string& what) {
  auto impl = std::make_unique<Impl>();
  spm::util::Status st;
  try {
    st = impl->proc.LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {
    // The library throws on some corrupted models instead of returning a status (an empty piece:
    // "Darts ... zero-length key", found by tests/fuzz/sentencepiece_fuzz.cpp).
    fail("vocab", what, " is not a SentencePiece model (corrupted or another format): ", e.what());
  }
  ATTN_CHECK(st.ok(), "vocab", what, " is not a SentencePiece model (corrupted or another format): ",
             spm_message(st));
  const spm::SentencePieceProcessor& p = impl->proc;
  const int ids[kNumSpecial] = {p.pad_id(), p.bos_id(), p.eos_id(), p.unk_id()};
  for (int64_t i = 0; i < kNumSpecial; ++i) {
    const bool ok = ids[i] == i && p.GetPieceSize() > i && p.IdToPiece(static_cast<int>(i)) == kSpecialPieces[i];
    ATTN_CHECK(ok, "vocab", what, " was not made by `attn vocab train`: its special tokens are pad=", p.pad_id(),
               " bos=", p.bos_id(), " eos=", p.eos_id(), " unk=", p.unk_id(),
               ", attn needs <pad>=0 <bos>=1 <eos>=2 <unk>=3");
  }
  impl->bytes = std::move(bytes);
  return SentencePieceVocab(std::move(impl));
}

SentencePieceVocab SentencePieceVocab::load(const std::string& path) {
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / kSentencePieceFileName).string() : path;
  ATTN_CHECK(fs::is_regular_file(file, ec), "vocab", "no SentencePiece model at '", file, "'");
  return from_serialized(read_file(file), "'" + file + "'");
}

void SentencePieceVocab::save(const std::string& path) const { write_file_atomic(path, impl_->bytes); }

std::string SentencePieceVocab::save_to_folder(const std::string& dir) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  ATTN_CHECK(fs::is_directory(dir), "vocab", "cannot create folder '", dir, "': ", ec.message());
  const std::string file = (fs::path(dir) / kSentencePieceFileName).string();
  save(file);
  return file;
}

int64_t SentencePieceVocab::size() const { return impl_->proc.GetPieceSize(); }

const std::string& SentencePieceVocab::token(int64_t id) const {
  ATTN_CHECK(id >= 0 && id < size(), "vocab", "id ", id, " out of range [0, ", size(), ")");
  return impl_->proc.IdToPiece(static_cast<int>(id));
}

bool SentencePieceVocab::has_mask() const {
  return size() > kMask && !impl_->proc.IsControl(static_cast<int>(kMask)) &&
         impl_->proc.IdToPiece(static_cast<int>(kMask)) == kMaskPiece;
}

int64_t SentencePieceVocab::id(const std::string& piece) const { return impl_->proc.PieceToId(piece); }

std::vector<int64_t> SentencePieceVocab::encode(const std::string& text) const {
  const int64_t bad = invalid_utf8_at(text);
  ATTN_CHECK(bad < 0, "vocab", "invalid UTF-8 at byte ", bad);
  std::vector<int> ids;
  const spm::util::Status st = impl_->proc.Encode(text, &ids);
  ATTN_CHECK(st.ok(), "vocab", "cannot encode: ", spm_message(st));
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::vector<std::string> SentencePieceVocab::encode_pieces(const std::string& text) const {
  std::vector<std::string> out;
  for (int64_t i : encode(text)) out.push_back(token(i));
  return out;
}

std::string SentencePieceVocab::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> kept;
  for (int64_t i : ids) {
    ATTN_CHECK(i >= 0 && i < size(), "vocab", "id ", i, " out of range [0, ", size(), ")");
    if (i == kPad || i == kBos) continue;
    if (i == kEos) break;
    kept.push_back(static_cast<int>(i));
  }
  std::string out;
  const spm::util::Status st = impl_->proc.Decode(kept, &out);
  ATTN_CHECK(st.ok(), "vocab", "cannot decode: ", spm_message(st));
  return out;
}

std::vector<std::string> SentencePieceVocab::labels(const std::vector<int64_t>& ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (int64_t i : ids) out.push_back(token(i));
  return out;
}

const std::string& SentencePieceVocab::serialized() const { return impl_->bytes; }

std::string SentencePieceVocab::fingerprint() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  for (unsigned char c : impl_->bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace attn::io
