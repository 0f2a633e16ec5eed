// Input that sets a size, end to end (issue 22): every config.json key, command-line option
// and data file that could make attn allocate without bound is refused at once, by name, with
// little memory. Each bad case runs the attn executable (ATTN_BINARY) through the shell and
// measures it: exit status 1 (an error, not a crash or a signal), the key or option named on
// stderr, under 5 s of wall time and 64 MiB of peak resident memory (wait4's ru_maxrss, which
// covers the shell and attn; 30 s and 256 MiB under AddressSanitizer). Before these bounds the same cases took gigabytes or minutes.
// Also here, the defects found with them: a learned-position model's translate limit, global
// prompt and line numbers in batched messages, fill-mask's UTF-8 offset, seeds, unknown
// commands and parse errors, and --resume over an incomplete checkpoint.
// Controls: valid folders still load and answer (info, translate, generate) with the same
// helpers, so a harness that failed every command would fail the controls.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attn/core/storage.h"
#include "attn/io/atomic_file.h"
#include "attn/io/bpe.h"
#include "attn/models/decoder_only.h"
#include "attn/models/factory.h"
#include "attn/models/gpt2.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using models::test_util::TempDir;

// The bounds. Under AddressSanitizer (the sanitizer build, make sanitize) every process
// carries shadow memory and a quarantine and runs several times slower, so they grow by as
// much: still far below the gigabytes and minutes these cases took before they were bounded.
#if defined(__SANITIZE_ADDRESS__)
#define ATTN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTN_TEST_ASAN 1
#endif
#endif
#ifdef ATTN_TEST_ASAN
constexpr double kMaxMib = 256.0, kMaxSeconds = 30.0;
#else
constexpr double kMaxMib = 64.0, kMaxSeconds = 5.0;
#endif

struct Measured {
  int exit_code = -1;  // -1: killed by a signal or not run
  std::string out, err;
  double seconds = 0;  // wall time
  double rss_mib = 0;  // peak resident memory of the shell and attn
};

// Runs `ATTN_BINARY args` in `dir` through /bin/sh with `input` on stdin, measuring it. The
// shell is this process's child, so wait4's rusage holds the peak RSS of it and of attn.
Measured run_measured(const std::string& dir, const std::string& args, const std::string& input = "") {
  io::write_file_atomic(dir + "/stdin.txt", input);
  const std::string cmd = "cd '" + dir + "' && exec '" + ATTN_BINARY + "' " + args + " <stdin.txt >stdout.txt 2>stderr.txt";
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  Measured m;
  int status = 0;
  rusage ru{};
  if (pid > 0 && wait4(pid, &status, 0, &ru) == pid) {
    if (WIFEXITED(status)) m.exit_code = WEXITSTATUS(status);
    m.rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.out = io::read_file(dir + "/stdout.txt");
  m.err = io::read_file(dir + "/stderr.txt");
  return m;
}

// A refusal as issue 22 asks for it: status 1 with the "attn: error:" prefix, every needle on
// stderr, fast and small.
void expect_refused(const Measured& m, const std::vector<std::string>& needles) {
  EXPECT_EQ(m.exit_code, 1) << m.err;
  EXPECT_EQ(m.err.rfind("attn: error: ", 0), 0u) << m.err;
  for (const std::string& n : needles) EXPECT_NE(m.err.find(n), std::string::npos) << "expected '" << n << "' in:\n" << m.err;
  EXPECT_LT(m.seconds, kMaxSeconds) << m.err;
  EXPECT_LT(m.rss_mib, kMaxMib) << m.err;
}

const std::string kShape = "--d-model 16 --heads 2 --d-ff 32 --layers 1 --quiet --no-report --samples 0 --threads 1";
const std::string kTiny = kShape + " --epochs 1";

// Copies folder `from` to `to` with config.json's keys overwritten by `edit`.
void copy_with_config(const std::string& from, const std::string& to, const json& edit) {
  fs::remove_all(to);
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from))
    if (e.is_regular_file()) fs::copy_file(e.path(), fs::path(to) / e.path().filename());
  json c = json::parse(io::read_file(to + "/config.json"));
  for (const auto& [k, v] : edit.items()) c[k] = v;
  io::write_file_atomic(to + "/config.json", c.dump());
}

// Three tiny trained folders shared by every test: an encoder-decoder (sinusoidal), a
// decoder-only LM with 32 learned positions, and an encoder-decoder with 8 learned positions.
class Limits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY;
    tmp_ = new TempDir("attn_limits");
    const std::string d = tmp_->path;
    io::write_file_atomic(d + "/lm.txt", "hello world this is text\nanother line of text here\n");
    for (const std::string& args :
         {"train --out ed --task reverse --length 4 --train-size 64 --valid-size 8 " + kTiny,
          "train --out lm --arch decoder-only --text lm.txt --positional learned --max-len 32 " + kTiny,
          "train --out learned --task reverse --length 4 --train-size 64 --valid-size 8 --positional learned "
          "--max-len 8 " + kTiny}) {
      const Measured m = run_measured(d, args);
      ASSERT_EQ(m.exit_code, 0) << args << "\n" << m.err;
    }
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }
  static std::string dir() { return tmp_->path; }
  static TempDir* tmp_;
};
TempDir* Limits::tmp_ = nullptr;

// ---- config.json ------------------------------------------------------------------------------

TEST_F(Limits, ValidFoldersStillLoadControl) {
  const Measured info = run_measured(dir(), "info --model ed");
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_LT(info.rss_mib, kMaxMib);
  const Measured t = run_measured(dir(), "translate --model ed --ids", "5 6 7\n");
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_FALSE(t.out.empty());
}

// attn info reads config.json and the weights file's header, never the weights: a folder of a
// model far larger than this machine's memory (a sparse weights file, which takes no disk)
// answers fast and small, with the parameter count of its header; translate/generate, which
// must build the model, refuse it by its memory (the control).
TEST_F(Limits, InfoOfAModelLargerThanMemoryReadsOnlyTheHeader) {
  models::ModelConfig c = models::test_util::broken_base_config();
  c.arch = models::Arch::DecoderOnly;
  c.d_model = 16384;
  c.n_heads = 16;
  c.d_ff = 65536;
  c.n_decoder_layers = 8;
  c.src_vocab_size = c.tgt_vocab_size = 1000;
  const auto layout = models::make_model_layout(c);  // names and shapes, no memory
  json header = json::object();
  int64_t offset = 0;
  for (const auto& [name, t] : layout->named_parameters()) {
    const int64_t bytes = t.numel() * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string big = dir() + "/big";
  fs::create_directories(big);
  {
    std::string prefix(8, '\0');
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    io::write_file_atomic(big + "/model.safetensors", prefix + text);
  }
  fs::resize_file(big + "/model.safetensors", 8 + text.size() + static_cast<uintmax_t>(offset));  // sparse
  io::write_file_atomic(big + "/config.json", c.to_json().dump(2));
  const Measured info = run_measured(dir(), "info --model big");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("parameters: " + std::to_string(layout->num_parameters()) + " total"), std::string::npos)
      << info.out;
  EXPECT_LT(info.seconds, kMaxSeconds);
  EXPECT_LT(info.rss_mib, kMaxMib);
  if (static_cast<double>(offset) > static_cast<double>(physical_memory_bytes())) {
    expect_refused(run_measured(dir(), "generate --model big", "hello\n"), {"more than this machine's"});
  }
}

TEST_F(Limits, HugeConfigKeysAreRefusedByNameBeforeAnyAllocation) {
  const int64_t t12 = 1000000000000;
  struct Case {
    const char* from;
    json edit;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"ed", {{"n_decoder_layers", t12}}, {"n_decoder_layers 1000000000000 is above the limit 1024"}},
      {"ed", {{"n_encoder_layers", t12}}, {"n_encoder_layers 1000000000000 is above the limit 1024"}},
      {"ed", {{"d_model", 1000000000}}, {"d_model 1000000000 is above the limit 65536"}},
      {"ed", {{"d_ff", t12}}, {"d_ff 1000000000000 is above the limit"}},
      {"ed", {{"src_vocab_size", t12}, {"tgt_vocab_size", t12}}, {"src_vocab_size 1000000000000 is above the limit"}},
      {"lm", {{"max_len", t12}}, {"max_len 1000000000000 is above the limit"}},
      {"ed", {{"n_experts", 1000000000}}, {"n_experts 1000000000 is above the limit 1024"}},
      {"ed", {{"src_vocab_size", int64_t{1} << 62}, {"tgt_vocab_size", int64_t{1} << 62}, {"d_model", 4}},
       {"src_vocab_size 4611686018427387904 is above the limit"}},
      // Within every bound, but more than the weights file holds: refused from its header.
      {"ed", {{"n_decoder_layers", 1000}}, {"implies at least", "holds", "n_decoder_layers 1000"}},
      {"ed", {{"d_model", 65536}, {"n_heads", 2}}, {"implies at least", "d_model 65536"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].edit.dump());
    const std::string bad = "bad" + std::to_string(i);
    copy_with_config(dir() + "/" + cases[i].from, dir() + "/" + bad, cases[i].edit);
    expect_refused(run_measured(dir(), "info --model " + bad), cases[i].needles);
    if (std::string(cases[i].from) == "ed")
      expect_refused(run_measured(dir(), "translate --ids --model " + bad, "5 6 7\n"), cases[i].needles);
    else
      expect_refused(run_measured(dir(), "generate --model " + bad, "hello\n"), cases[i].needles);
  }
}

// A GPT-2 folder (Hugging Face's config.json, byte-level vocab.json, no merges).
void write_gpt2_folder(const std::string& dir) {
  const json hf = {{"model_type", "gpt2"}, {"n_embd", 8},       {"n_head", 2},
                   {"n_layer", 1},         {"n_positions", 16}, {"vocab_size", 257}};
  auto model = std::dynamic_pointer_cast<models::DecoderOnlyModel>(models::make_model(models::gpt2_config_from_json(hf)));
  models::save_gpt2(dir, *model);
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = io::byte_to_unicode(static_cast<uint8_t>(b));
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else s += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    vocab[s] = b;
  }
  vocab[io::BpeTokenizer::kEndOfText] = 256;
  io::write_file_atomic(dir + "/vocab.json", vocab.dump());
  io::write_file_atomic(dir + "/merges.txt", "#version: 0.2\n");
}

TEST_F(Limits, Gpt2ConfigSizesAreRefusedInItsOwnWords) {
  write_gpt2_folder(dir() + "/gpt2");
  const Measured ok = run_measured(dir(), "generate --model gpt2 --max-tokens 2", "ab\n");  // control
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  copy_with_config(dir() + "/gpt2", dir() + "/gpt2_huge", {{"n_layer", 1000000000000}});
  expect_refused(run_measured(dir(), "generate --model gpt2_huge", "ab\n"),
                 {"'n_layer' 1000000000000 is above the limit 1024"});
  copy_with_config(dir() + "/gpt2", dir() + "/gpt2_more", {{"n_layer", 1000}});
  expect_refused(run_measured(dir(), "generate --model gpt2_more", "ab\n"), {"implies at least", "n_layer 1000"});
}

// ---- command-line options -----------------------------------------------------------------------

TEST_F(Limits, SizeOptionsAreBoundedByName) {
  expect_refused(run_measured(dir(), "translate --ids --model ed --beam 99999999999999", "5 6 7\n"),
                 {"--beam must be in [1, 1024]"});
  expect_refused(run_measured(dir(), "generate --model lm --beam 99999999999999", "hello\n"),
                 {"--beam must be in [1, 1024]"});
  expect_refused(run_measured(dir(), "translate --ids --model ed --max-len 1000000000000", "5 6 7\n"),
                 {"--max-len must be in [1, 1048576]"});
  expect_refused(run_measured(dir(), "generate --model lm --max-tokens 1000000000000", "hello\n"),
                 {"--max-tokens must be in [1, 1048576]"});
  const std::string train = "train --out t --force --quiet --no-report ";
  expect_refused(run_measured(dir(), train + "--d-model 1000000000 --heads 1"), {"d_model 1000000000", "(--d-model)"});
  expect_refused(run_measured(dir(), train + "--layers 1000000000000"), {"layers 1000000000000", "--layers"});
  expect_refused(run_measured(dir(), train + "--train-size 100000000000"), {"train_size 100000000000", "(--train-size)"});
  expect_refused(run_measured(dir(), train + "--length 100000000000"), {"length 100000000000", "(--length)"});
  expect_refused(run_measured(dir(), train + "--batch-size 100000000000000"), {"batch_size 100000000000000", "(--batch-size)"});
}

TEST_F(Limits, AOneLineCorpusTooLongForMemorySuggestsMaxLength) {
  // 10 MB on one line: one example of 10^7 tokens, whose attention alone exceeds any machine.
  std::string line(10'000'000, 'a');
  for (size_t i = 0; i < line.size(); i += 7) line[i] = 'b';
  io::write_file_atomic(dir() + "/long.txt", line + "\n");
  io::write_file_atomic(dir() + "/long.tsv", line.substr(0, 5'000'000) + "\t" + line.substr(0, 5'000'000) + "\n");
  const std::string train = "train --out t --force --quiet --no-report ";
  for (const char* data : {"--arch decoder-only --text long.txt", "--arch decoder-only --text long.txt --stream",
                           "--data long.tsv", "--data long.tsv --stream"}) {
    SCOPED_TRACE(data);
    // Refused from the line's bytes and words, before it is read into memory and tokenized.
    expect_refused(run_measured(dir(), train + data), {"line 1 holds at least", "--max-length"});
  }
  // Control: with --max-length the long line is skipped and the short ones train.
  io::write_file_atomic(dir() + "/mixed.txt", line.substr(0, 300'000) + "\nabab\nbaba\n");
  const Measured ok = run_measured(dir(), train +
                                    "--samples 2 --arch decoder-only --text mixed.txt --max-length 20 --d-model 16 "
                                    "--heads 2 --d-ff 32 --layers 1 --epochs 1 --threads 1");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_LT(ok.seconds, 10.0);  // the samples skip the long line too
}

// ---- defects found with the same inputs ---------------------------------------------------------

TEST_F(Limits, TranslateStopsWhereLearnedPositionsEnd) {
  // Sources of 3 tokens: the default limit (3 + 50) is capped at max_len 8; greedy and beam.
  for (const char* beam : {"", " --beam 3"}) {
    const Measured m = run_measured(dir(), std::string("translate --ids --model learned") + beam, "5 6 7\n6 5\n");
    EXPECT_EQ(m.exit_code, 0) << beam << "\n" << m.err;
    EXPECT_EQ(std::count(m.out.begin(), m.out.end(), '\n'), 2) << m.out;
  }
}

TEST_F(Limits, BatchedMessagesNameTheLineOrPromptOfTheWholeInput) {
  const Measured t = run_measured(dir(), "translate --ids --batch-size 2 --model learned", "5 6\n6 5\n5 6 7 8 5 6 7 8 5\n");
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_NE(t.err.find("line 3: the source has 9 tokens, more than the 8 learned positions"), std::string::npos) << t.err;
  EXPECT_EQ(std::count(t.out.begin(), t.out.end(), '\n'), 2) << t.out;  // the lines before are answered

  // The third prompt is too long for the LM's 32 learned positions (<bos> + 32 tokens).
  std::string long_prompt;
  for (int i = 0; i < 32; ++i) long_prompt += i ? " 5" : "5";
  const Measured g = run_measured(dir(), "generate --ids --batch-size 2 --model lm", "5 6\n6 5\n" + long_prompt + "\n");
  EXPECT_EQ(g.exit_code, 1);
  EXPECT_NE(g.err.find("prompt 3 has 32 tokens"), std::string::npos) << g.err;
}

TEST_F(Limits, FillMaskNamesTheLineAndTheOffsetOfInvalidUtf8) {
  io::write_file_atomic(dir() + "/mlm.txt", "aaaa\nbbbbb\ncccc\ndddddd\n");
  const Measured train = run_measured(dir(), "train --out mlm --arch encoder-only --text mlm.txt " + kTiny);
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const Measured m = run_measured(dir(), "fill-mask --model mlm", "a[MASK]b\nab[MASK]c\xff" "d\n");
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_NE(m.err.find("stdin line 2: invalid UTF-8 at byte 10 of the text (byte value 0xFF, after \"ab[MASK]c\")"),
            std::string::npos)
      << m.err;
}

TEST_F(Limits, SeedsAreNotWrapped) {
  expect_refused(run_measured(dir(), "train --out s --seed -1"), {"--seed", "-1"});
  expect_refused(run_measured(dir(), "train --out s --data-seed -5"), {"--data-seed"});
  expect_refused(run_measured(dir(), "generate --model lm --sample --seed -1", "hello\n"), {"--seed"});
  expect_refused(run_measured(dir(), "train --out s --seed 18446744073709551616"), {"--seed"});
}

TEST_F(Limits, CommandLineMistakesExitOneWithThePrefix) {
  expect_refused(run_measured(dir(), "nosuchcmd"), {"unknown command 'nosuchcmd'", "translate"});
  expect_refused(run_measured(dir(), "info --model ed --no-such-option"), {"--no-such-option"});
  expect_refused(run_measured(dir(), "translate"), {"--model"});
  const Measured help = run_measured(dir(), "translate --help");  // control: help is no error
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(help.err.empty()) << help.err;
}

TEST_F(Limits, ResumeSaysWhichIncompleteCheckpointItSkips) {
  const std::string run = "train --out r --task reverse --length 4 --train-size 64 --valid-size 8 --batch-size 16 " +
                          kShape + " --epochs 2 --checkpoint-every 2 --keep 0";
  const Measured first = run_measured(dir(), run);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // The newest checkpoint loses its weights (a save cut short would leave that).
  std::string newest;
  for (const auto& e : fs::directory_iterator(dir() + "/r/checkpoints"))
    if (e.path().filename().string() > fs::path(newest).filename().string()) newest = e.path().string();
  ASSERT_FALSE(newest.empty());
  fs::remove(newest + "/model.safetensors");
  const Measured m = run_measured(dir(), "train --out r --resume --epochs 3 --quiet --no-report --samples 0");
  EXPECT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.err.find("skipping checkpoint 'r/checkpoints/" + fs::path(newest).filename().string() + "'"),
            std::string::npos)
      << m.err;
  EXPECT_NE(m.err.find("model.safetensors missing"), std::string::npos) << m.err;
  EXPECT_NE(m.err.find("resuming from"), std::string::npos) << m.err;
}

}  // namespace
}  // namespace attn::cli
