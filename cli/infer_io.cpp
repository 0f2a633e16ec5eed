// What the inference commands share (see infer_io.h): model folders, line parsing with line
// numbers, padded batches, search over a batch and teacher-forced scoring. Everything runs
// with the model in evaluation mode and under NoGradGuard (no tape is recorded).
// Deliberately no threading of its own: the ops' kernels parallelise inside each call.
#include "infer_io.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

#include "attn/autograd/tape.h"
#include "attn/core/error.h"
#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/io/atomic_file.h"
#include "attn/models/checkpoint.h"
#include "attn/ops/ops.h"
#include "attn/train/train_config.h"

namespace attn::cli {

namespace fs = std::filesystem;

// ---- model folders ------------------------------------------------------------------------

namespace {

// The command that serves a model family, for messages.
const char* command_for(models::Arch arch) {
  switch (arch) {
    case models::Arch::EncoderDecoder: return "attn translate, score, eval or inspect";
    case models::Arch::DecoderOnly: return "attn generate";
    case models::Arch::EncoderOnly: return "attn fill-mask";
  }
  return "?";
}

}  // namespace

ModelFolder open_model_folder(const std::string& dir, const char* command, bool need_vocab, models::Arch arch) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail(command, "model folder '", dir, "' does not exist");
  if (!fs::is_directory(dir, ec)) fail(command, "'", dir, "' is not a folder (--model takes a model folder)");
  if (!fs::exists(fs::path(dir) / models::kConfigFileName, ec))
    fail(command, "'", dir, "' is not a model folder: it has no ", models::kConfigFileName);

  ModelFolder f;
  f.dir = dir;
  f.base = models::load_model(dir);
  if (f.base->arch() != arch)
    fail(command, "the model in '", dir, "' is ", models::arch_name(f.base->arch()), "; ", command, " needs ",
         arch == models::Arch::DecoderOnly ? "a " : "an ", models::arch_name(arch), " model (",
         models::arch_name(f.base->arch()), " models: ", command_for(f.base->arch()), ")");
  f.model = std::dynamic_pointer_cast<models::EncoderDecoderModel>(f.base);
  f.base->eval();
  const models::ModelConfig& c = f.base->config();
  f.pad = c.pad_id;
  f.bos = c.bos_id;
  f.eos = c.eos_id;
  const bool single_stack = arch != models::Arch::EncoderDecoder;
  f.src_vocab_size = c.src_vocab_size;
  f.tgt_vocab_size = single_stack ? c.vocab_size() : c.tgt_vocab_size;
  if (f.bos < 0 && arch != models::Arch::EncoderOnly)
    fail(command, "the model in '", dir, "' has no BOS token (bos_id = -1), so it cannot decode");

  const fs::path vocab_path = fs::path(dir) / kVocabFileName;
  if (fs::exists(vocab_path, ec)) {
    f.vocab = train::Vocab::load(vocab_path.string());
    const int64_t limit = std::min(f.src_vocab_size, f.tgt_vocab_size);
    if (f.vocab->size() > limit)
      fail(command, "'", vocab_path.string(), "' has ", f.vocab->size(), " tokens but the model's vocabulary has ",
           limit, ": the vocabulary does not belong to this model");
  } else if (need_vocab) {
    fail(command, "'", dir, "' has no ", kVocabFileName,
         ", so text cannot be tokenized; pass --ids to read and write token ids");
  }

  const fs::path tc_path = fs::path(dir) / kTrainConfigFileName;
  if (fs::exists(tc_path, ec)) {
    try {
      f.train_config = nlohmann::json::parse(io::read_file(tc_path.string()));
    } catch (const nlohmann::json::exception& e) {
      fail(command, "'", tc_path.string(), "' is not valid JSON: ", e.what());
    }
  }
  return f;
}

// ---- lines and tokens ---------------------------------------------------------------------

bool LineReader::next(std::string& line) {
  if (!std::getline(in_, line)) return false;
  ++line_;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line_ == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
  return true;
}

namespace {

bool is_ascii_space(const std::string& s) {
  return s.size() == 1 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r' || s[0] == '\v' || s[0] == '\f');
}

// A token as a message shows it: quoted, with control characters escaped.
std::string quoted(const std::string& token) {
  std::string out = "'";
  for (unsigned char ch : token) {
    if (ch < 0x20 || ch == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[ch >> 4];
      out += hex[ch & 15];
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "'";
}

}  // namespace

std::vector<std::string> split_tokens(const std::string& text, const train::Vocab& vocab) {
  std::vector<std::string> tokens = train::tokenize(text, vocab.tokenization());
  if (vocab.tokenization() == train::Tokenization::Chars && !vocab.contains(" ")) {
    std::erase_if(tokens, [](const std::string& t) { return is_ascii_space(t); });
  }
  return tokens;
}

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t i = 0;
  const auto space = [](char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
  };
  while (i < text.size()) {
    if (space(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !space(text[j])) ++j;
    const std::string tok = text.substr(i, j - i);
    int64_t v = -1;
    const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec != std::errc() || end != tok.data() + tok.size() || v < 0 || tok[0] == '+' || tok[0] == '-')
      fail("ids", quoted(tok), " is not a token id (a non-negative decimal integer)");
    ids.push_back(v);
    i = j;
  }
  return ids;
}

std::vector<int64_t> TokenCodec::read(const std::string& field, int64_t line_no, const char* what) const {
  const std::string where = line_no > 0 ? str_cat(source, " line ", line_no, ": ") : source + ": ";
  std::vector<int64_t> ids;
  try {
    if (vocab && vocab->sentencepiece()) {
      ids = vocab->encode(field);  // characters the model lacks read as <unk> (SentencePiece's rule)
      if (unknown) *unknown += std::count(ids.begin(), ids.end(), train::Vocab::kUnk);
    } else if (vocab) {
      const std::vector<std::string> tokens = split_tokens(field, *vocab);
      ids.reserve(tokens.size());
      for (const std::string& t : tokens) {
        if (!vocab->contains(t) && unknown) {
          ++*unknown;
          ids.push_back(train::Vocab::kUnk);
          continue;
        }
        if (!vocab->contains(t))
          fail(command.c_str(), where, "token ", quoted(t), " of the ", what, " is not in the model's vocabulary (",
               vocab->size(), " tokens in ", kVocabFileName, ")");
        ids.push_back(vocab->id(t));
      }
    } else {
      ids = parse_ids(field);
      for (int64_t id : ids)
        if (id >= vocab_size)
          fail(command.c_str(), where, "token id ", id, " of the ", what,
               " is out of range: the model's vocabulary has ", vocab_size, " ids (0..", vocab_size - 1, ")");
    }
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.find(where) != std::string::npos) throw;
    fail(command.c_str(), where, msg);  // tokenizer / id-parser errors gain the line
  }
  if (ids.empty()) fail(command.c_str(), where, "the ", what, " is empty (every line needs at least one token)");
  for (int64_t id : ids)
    if (id == pad)
      fail(command.c_str(), where, "the ", what, " holds the padding token (id ", pad, "), which the model ignores");
  return ids;
}

std::string TokenCodec::write(const std::vector<int64_t>& ids) const {
  if (vocab) return vocab->decode(ids);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

std::vector<std::string> TokenCodec::labels(const std::vector<int64_t>& ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    if (vocab && id >= 0 && id < vocab->size())
      out.push_back(vocab->token(id));
    else
      out.push_back(std::to_string(id));
  }
  return out;
}

Tensor pad_batch(const std::vector<std::vector<int64_t>>& seqs, int64_t pad) {
  ATTN_CHECK(!seqs.empty(), "pad_batch", "no sequences");
  size_t len = 0;
  for (const auto& s : seqs) {
    ATTN_CHECK(!s.empty(), "pad_batch", "an empty sequence");
    len = std::max(len, s.size());
  }
  std::vector<int64_t> values(seqs.size() * len, pad < 0 ? 0 : pad);
  for (size_t b = 0; b < seqs.size(); ++b) std::copy(seqs[b].begin(), seqs[b].end(), values.begin() + b * len);
  return Tensor::from_vector<int64_t>(values, {static_cast<int64_t>(seqs.size()), static_cast<int64_t>(len)});
}

// ---- search -------------------------------------------------------------------------------

void validate(const SearchSettings& s) {
  ATTN_CHECK(s.beam >= 1, "search", "--beam must be >= 1, got ", s.beam);
  ATTN_CHECK(s.n_best >= 1 && s.n_best <= s.beam, "search", "--n-best must be in [1, --beam] = [1, ", s.beam, "], got ",
             s.n_best);
  ATTN_CHECK(std::isfinite(s.alpha) && s.alpha >= 0, "search", "--alpha must be finite and >= 0, got ", s.alpha);
  ATTN_CHECK(!s.max_len || *s.max_len >= 1, "search", "--max-len must be >= 1, got ", s.max_len ? *s.max_len : 0);
}

std::vector<std::vector<decode::Hypothesis>> search_batch(const ModelFolder& folder,
                                                          const std::vector<std::vector<int64_t>>& srcs,
                                                          const SearchSettings& settings) {
  validate(settings);
  NoGradGuard no_grad;
  decode::TransformerDecoder decoder(*folder.model);
  const Tensor src = pad_batch(srcs, folder.pad);
  std::vector<std::vector<decode::Hypothesis>> out;
  if (settings.beam == 1 && settings.n_best == 1) {
    decode::GreedyOptions o;
    o.bos = folder.bos;
    o.eos = folder.eos;
    o.pad = folder.pad;
    o.max_len = settings.max_len;
    for (decode::Hypothesis& h : decode::greedy_search(decoder, src, o)) out.push_back({std::move(h)});
    return out;
  }
  decode::BeamOptions o;
  o.beam = settings.beam;
  o.alpha = settings.alpha;
  o.n_best = settings.n_best;
  o.bos = folder.bos;
  o.eos = folder.eos;
  o.pad = folder.pad;
  o.max_len = settings.max_len;
  return decode::beam_search(decoder, src, o);
}

// ---- teacher forcing ----------------------------------------------------------------------

double ForcedScores::total() const {
  double s = 0;
  for (double v : logprobs) s += v;
  return s;
}

std::vector<ForcedScores> teacher_forced(const ModelFolder& folder, const std::vector<std::vector<int64_t>>& srcs,
                                         const std::vector<std::vector<int64_t>>& tgts) {
  ATTN_CHECK(srcs.size() == tgts.size() && !srcs.empty(), "teacher_forced", srcs.size(), " sources and ", tgts.size(),
             " targets");
  ATTN_CHECK(folder.eos >= 0, "teacher_forced",
             "the model has no EOS token (eos_id = -1), so a target's end cannot be scored");
  NoGradGuard no_grad;
  std::vector<std::vector<int64_t>> tgt_in;
  tgt_in.reserve(tgts.size());
  for (const auto& t : tgts) {
    std::vector<int64_t> row{folder.bos};
    row.insert(row.end(), t.begin(), t.end());
    tgt_in.push_back(std::move(row));
  }
  const Tensor src = pad_batch(srcs, folder.pad);
  const Tensor in = pad_batch(tgt_in, folder.pad);
  const Tensor lp = log_softmax(folder.model->forward(src, in));  // [B, T, V]
  const int64_t T = lp.size(1), V = lp.size(2);
  const std::vector<double> values = lp.to_vector<double>();
  std::vector<ForcedScores> out(tgts.size());
  for (size_t b = 0; b < tgts.size(); ++b) {
    const auto& t = tgts[b];
    for (size_t i = 0; i <= t.size(); ++i) {
      const int64_t want = i < t.size() ? t[i] : folder.eos;
      const double* row = values.data() + (static_cast<int64_t>(b) * T + static_cast<int64_t>(i)) * V;
      ATTN_CHECK(want >= 0 && want < V, "teacher_forced", "target id ", want, " is outside the vocabulary [0, ", V,
                 ")");
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[best]) best = v;
      out[b].logprobs.push_back(row[want]);
      out[b].argmax.push_back(best);
    }
  }
  return out;
}

// ---- training configuration ---------------------------------------------------------------

std::optional<train::TrainConfig> run_train_config(const nlohmann::json& tc) {
  if (!tc.is_object()) return std::nullopt;
  try {
    return train::TrainConfig::from_json(tc);
  } catch (const std::exception&) {
    return std::nullopt;  // not written by attn train (or by another version): no task known
  }
}

std::optional<RunTask> task_from_train_config(const nlohmann::json& tc) {
  const auto c = run_train_config(tc);
  if (!c || c->task.empty() || c->uses_tsv()) return std::nullopt;
  RunTask r;
  r.task.kind = train::parse_task_kind(c->task);
  r.task.length = c->length;
  r.task.min_length = c->min_length;
  r.task.n_symbols = c->symbols;
  train::validate(r.task);
  r.data_seed = c->data_seed;
  r.valid_size = c->valid_size;
  return r;
}

std::string valid_path_from_train_config(const nlohmann::json& tc, const std::string& run_dir) {
  const auto c = run_train_config(tc);
  if (!c || c->valid_path.empty()) return {};
  const fs::path p = c->valid_path;
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return p.string();
  if (p.is_relative() && fs::is_regular_file(fs::path(run_dir) / p, ec)) return (fs::path(run_dir) / p).string();
  return {};
}

// ---- evaluation ---------------------------------------------------------------------------

EvalMetrics evaluate(const ModelFolder& folder, const std::vector<train::Example>& examples, int64_t batch_size,
                     const SearchSettings& settings) {
  ATTN_CHECK(!examples.empty(), "eval", "no examples to evaluate");
  ATTN_CHECK(batch_size >= 1, "eval", "--batch-size must be >= 1, got ", batch_size);
  EvalMetrics m;
  double nll = 0;
  int64_t forced_right = 0, searched_right = 0, exact = 0;
  for (size_t start = 0; start < examples.size(); start += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(examples.size(), start + static_cast<size_t>(batch_size));
    std::vector<std::vector<int64_t>> srcs, tgts;
    for (size_t i = start; i < end; ++i) {
      srcs.push_back(examples[i].src);
      tgts.push_back(examples[i].tgt);
    }
    const std::vector<ForcedScores> forced = teacher_forced(folder, srcs, tgts);
    // Greedy outputs longer than the longest reference + EOS are wrong whatever follows, so
    // greedy search stops there (as the trainer's validation does); beam search is not cut,
    // since a shorter limit can change which hypothesis wins.
    SearchSettings s = settings;
    if (!s.max_len && s.beam == 1 && s.n_best == 1) {
      size_t longest = 0;
      for (const auto& t : tgts) longest = std::max(longest, t.size());
      s.max_len = static_cast<int64_t>(longest) + 1;
    }
    const auto found = search_batch(folder, srcs, s);
    for (size_t k = 0; k < srcs.size(); ++k) {
      const auto& tgt = tgts[k];
      const decode::Hypothesis& h = found[k].front();
      for (size_t i = 0; i <= tgt.size(); ++i) {
        const int64_t want = i < tgt.size() ? tgt[i] : folder.eos;
        nll -= forced[k].logprobs[i];
        if (forced[k].argmax[i] == want) ++forced_right;
        // The output with its EOS (when it finished) against the reference with its EOS.
        const int64_t got = i < h.tokens.size() ? h.tokens[i] : (i == h.tokens.size() && h.finished ? folder.eos : -1);
        if (got == want) ++searched_right;
      }
      if (h.finished && h.tokens == tgt) ++exact;
      m.tokens += static_cast<int64_t>(tgt.size()) + 1;
    }
    m.examples += static_cast<int64_t>(srcs.size());
  }
  const double tokens = static_cast<double>(m.tokens);
  m.loss = nll / tokens;
  m.perplexity = std::exp(m.loss);
  m.token_acc = static_cast<double>(searched_right) / tokens;
  m.forced_token_acc = static_cast<double>(forced_right) / tokens;
  m.exact_acc = static_cast<double>(exact) / static_cast<double>(m.examples);
  return m;
}

}  // namespace attn::cli
