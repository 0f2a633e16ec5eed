// attn vocab (train, encode, decode) and attn eval's corpus metrics run as the user runs them
// (ATTN_BINARY through the shell): a vocabulary trained on a generated corpus round-trips text,
// `eval --hyp --ref` prints sacreBLEU's lines for a worked example, `eval --model --metric` scores
// exactly what `attn translate` outputs, and every bad input of the issue (invalid UTF-8, CRLF,
// empty lines, line-count mismatches, foreign or corrupted vocabulary files) exits cleanly.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "attn/io/atomic_file.h"
#include "attn/train/trainer.h"
#include "support/cli_run.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::cli {
namespace {

namespace fs = std::filesystem;
using models::test_util::TempDir;
using Result = test::Outcome;
using test::run_attn;

// A failure the program reported itself (not a crash), with the given parts in its message.
void expect_error(const Result& r, const std::vector<std::string>& parts) {
  EXPECT_GE(r.exit_code, 1) << r.out << r.err;
  EXPECT_LE(r.exit_code, 125) << "killed by a signal or not run: " << r.exit_code << "\n" << r.err;
  EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
  for (const std::string& p : parts)
    EXPECT_NE(r.err.find(p), std::string::npos) << "missing '" << p << "' in: " << r.err;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// 300 lines of a small English-like language.
std::string corpus() {
  const char* words[] = {"the",   "cat",    "sat",     "on",      "mat",    "dog",   "ran",    "far",
                         "away",  "from",   "house",   "quickly", "slowly", "and",   "then",   "garden",
                         "running", "walked", "big",  "small",   "yellow", "bird",  "flew",   "over",
                         "jumped", "fox",   "brown",   "lazy",    "river",  "was",   "with",   "night"};
  std::string out;
  uint32_t s = 11;
  for (int line = 0; line < 300; ++line) {
    for (int k = 0; k < 3 + line % 7; ++k) {
      s = s * 1103515245u + 12345u;
      out += (k ? " " : "") + std::string(words[(s >> 16) % 32]);
    }
    out += "\n";
  }
  return out;
}

class MetricsCli : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY; }
  std::string write(const std::string& name, const std::string& text) const {
    io::write_file_atomic(tmp_.file(name), text);
    return "'" + tmp_.file(name) + "'";
  }
  TempDir tmp_{"attn_metrics_cli"};
};

TEST_F(MetricsCli, VocabTrainWritesAFolderModelThatRoundTripsText) {
  const std::string input = write("corpus.txt", corpus());
  const Result t = run_attn(tmp_, "vocab train --input " + input + " --size 60 --type bpe --output '" +
                                      tmp_.file("run") + "'");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_TRUE(fs::is_regular_file(tmp_.file("run/sentencepiece.model")));
  EXPECT_NE(t.out.find("bpe, 60 pieces"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("300 read, 300 used"), std::string::npos) << t.out;

  const std::string text = "the dog walked slowly from the garden\nthe cat\n\n";
  const Result e = run_attn(tmp_, "vocab encode --vocab '" + tmp_.file("run") + "'", text);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto ids = lines_of(e.out);
  ASSERT_EQ(ids.size(), 3u) << e.out;
  EXPECT_TRUE(ids[2].empty());
  const Result d = run_attn(tmp_, "vocab decode --vocab '" + tmp_.file("run/sentencepiece.model") + "'", e.out);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(d.out, text);
  const Result p = run_attn(tmp_, "vocab encode --pieces --vocab '" + tmp_.file("run") + "'", "the cat\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.out.rfind("\xE2\x96\x81", 0), 0u) << p.out;  // "▁the ..."

  // --output FILE.model writes that file; unigram works the same way.
  const Result u = run_attn(tmp_, "vocab train --input " + input + " --size 50 --type unigram --output '" +
                                      tmp_.file("u.model") + "'");
  ASSERT_EQ(u.exit_code, 0) << u.err;
  EXPECT_TRUE(fs::is_regular_file(tmp_.file("u.model")));
}

TEST_F(MetricsCli, VocabBadInputExitsWithAMessage) {
  const std::string input = write("corpus.txt", corpus());
  const std::string out = " --output '" + tmp_.file("v") + "'";
  expect_error(run_attn(tmp_, "vocab train --input " + write("bad.txt", "ok line\nnot \xFF ok\n") + " --size 20" + out),
               {"bad.txt' line 2", "invalid UTF-8"});
  expect_error(run_attn(tmp_, "vocab train --input '" + tmp_.file("missing.txt") + "' --size 20" + out),
               {"missing.txt"});
  expect_error(run_attn(tmp_, "vocab train --input " + input + " --size 5000" + out), {"Vocabulary size too high"});
  expect_error(run_attn(tmp_, "vocab train --input " + input + " --type wordpiece" + out), {"wordpiece"});
  // A corrupted model, and SentencePiece's own model with its default ids (unk 0, no pad).
  expect_error(run_attn(tmp_, "vocab encode --vocab " + write("junk.model", "not a model"), "a\n"),
               {"not a SentencePiece model"});
  const std::string spm = "spm_train --input=" + input + " --model_prefix='" + tmp_.file("foreign") +
                          "' --vocab_size=30 --minloglevel=2 >/dev/null 2>&1";
  ASSERT_EQ(std::system(spm.c_str()), 0) << "spm_train (Debian's sentencepiece package) failed: " << spm;
  expect_error(run_attn(tmp_, "vocab encode --vocab '" + tmp_.file("foreign.model") + "'", "a\n"),
               {"was not made by `attn vocab train`", "unk=0"});
  // Bad lines on stdin name the line.
  ASSERT_EQ(run_attn(tmp_, "vocab train --input " + input + " --size 40" + out).exit_code, 0);
  expect_error(run_attn(tmp_, "vocab encode --vocab '" + tmp_.file("v") + "'", "fine\nbad \xC3\n"),
               {"stdin line 2", "invalid UTF-8"});
  expect_error(run_attn(tmp_, "vocab decode --vocab '" + tmp_.file("v") + "'", "5 6\n7 99999\n"),
               {"stdin line 2", "out of range"});
}

TEST_F(MetricsCli, EvalScoresHypothesesAgainstReferencesAsSacreBleuPrints) {
  // The worked example of metrics_test.cpp: BLEU (1/48)^(1/4); a second, exact line.
  const std::string hyp = write("hyp.txt", "the cat is on the mat\nHello, world!\n");
  const std::string ref = write("ref.txt", "the cat sat on the mat\r\nHello , world !\r\n");  // CRLF
  const Result r = run_attn(tmp_, "eval --hyp " + hyp + " --ref " + ref + " --metric bleu,chrf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0].rfind("BLEU = ", 0), 0u) << r.out;
  EXPECT_NE(lines[0].find("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp"), std::string::npos) << r.out;
  EXPECT_EQ(lines[1].rfind("chrF2 = ", 0), 0u) << r.out;

  const Result one = run_attn(tmp_, "eval --json --hyp " + write("h1.txt", "the cat is on the mat\n") + " --ref " +
                                        write("r1.txt", "the cat sat on the mat\n"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const nlohmann::json j = nlohmann::json::parse(one.out);
  EXPECT_NEAR(j["bleu"]["score"].get<double>(), 37.99178428257963, 1e-9);
  EXPECT_EQ(j["bleu"]["counts"], nlohmann::json({5, 3, 1, 0}));
  EXPECT_TRUE(j.contains("chrf"));  // bleu,chrf by default
  EXPECT_EQ(j["segments"], 1);

  // A second reference file: nrefs:2; an empty hypothesis line is allowed.
  const Result two = run_attn(tmp_, "eval --metric bleu --hyp " + write("h2.txt", "the cat is on the mat\n\n") +
                                        " --ref " + write("ra.txt", "the cat sat on the mat\nx y\n") + " --ref " +
                                        write("rb.txt", "there is a cat on the mat\nx y z\n"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.out.find("nrefs:2"), std::string::npos) << two.out;
}

TEST_F(MetricsCli, EvalMetricBadInputExitsWithAMessage) {
  const std::string hyp = write("hyp.txt", "a b c\nd e f\n");
  expect_error(run_attn(tmp_, "eval --hyp " + hyp + " --ref " + write("short.txt", "a b c\n")),
               {"has 2 lines", "has 1"});
  expect_error(run_attn(tmp_, "eval --hyp " + hyp + " --ref " + write("gap.txt", "a b c\n\n")), {"line 2 is empty"});
  expect_error(run_attn(tmp_, "eval --hyp " + hyp + " --ref " + write("utf.txt", "a b c\nd \xE2\x82 f\n")),
               {"utf.txt' line 2", "invalid UTF-8"});
  expect_error(run_attn(tmp_, "eval --hyp " + hyp + " --ref " + hyp + " --metric bleu,ter"), {"unknown metric 'ter'"});
  expect_error(run_attn(tmp_, "eval --hyp " + hyp), {"--ref"});
  expect_error(run_attn(tmp_, "eval --hyp " + hyp + " --ref '" + tmp_.file("none.txt") + "'"), {"none.txt"});
  expect_error(run_attn(tmp_, "eval --hyp " + hyp + " --ref " + hyp + " --smooth laplace"), {"laplace"});
  expect_error(run_attn(tmp_, "eval --metric bleu"), {"--model"});
}

// A reverse-task run folder trained for a second, then `eval --model --metric` against
// `translate` + `eval --hyp --ref` on the same TSV file: the same scores.
TEST_F(MetricsCli, EvalModelMetricScoresWhatTranslateOutputs) {
  train::TrainConfig c;
  c.task = "reverse";
  c.length = 5;
  c.symbols = 6;
  c.train_size = 1000;
  c.valid_size = 32;
  c.model.d_model = 32;
  c.model.n_heads = 2;
  c.model.n_encoder_layers = 1;
  c.model.n_decoder_layers = 1;
  c.model.d_ff = 64;
  c.model.dropout = 0.0;
  c.model.attention_dropout = 0.0;
  c.epochs = 5;
  c.batch_size = 32;
  c.schedule = train::ScheduleKind::Constant;
  c.lr = 0.01;
  c.label_smoothing = 0.0;
  c.keep = 1;
  c.threads = 1;
  const std::string run = tmp_.file("run");
  train::Trainer(c, run).run();

  const std::vector<std::string> srcs = {"31402", "01234", "55013", "2 4 1", "1 0"};
  const std::vector<std::string> refs = {"20413", "43210", "31055", "1 4 2", "0 1"};
  std::string tsv, src_lines, ref_lines;
  for (size_t i = 0; i < srcs.size(); ++i) {
    tsv += srcs[i] + "\t" + refs[i] + "\n";
    src_lines += srcs[i] + "\n";
    ref_lines += refs[i] + "\n";
  }
  const std::string data = write("test.tsv", tsv), ref = write("ref.txt", ref_lines);
  const Result e = run_attn(tmp_, "eval --json --metric bleu,chrf,chrf++ --model '" + run + "' --data " + data);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json je = nlohmann::json::parse(e.out);
  const Result t = run_attn(tmp_, "translate --model '" + run + "'", src_lines);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const std::string hyp = write("hyp.txt", t.out);
  const Result s = run_attn(tmp_, "eval --json --metric bleu,chrf,chrf++ --hyp " + hyp + " --ref " + ref);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const nlohmann::json js = nlohmann::json::parse(s.out);
  for (const char* m : {"bleu", "chrf", "chrf++"}) {
    ASSERT_TRUE(je.contains(m)) << e.out;
    EXPECT_EQ(je[m]["score"], js[m]["score"]) << m;
  }
  EXPECT_GT(je["chrf"]["score"].get<double>(), 50.0) << t.out;  // the model reverses
  // Without --metric the output has no corpus metrics.
  const Result plain = run_attn(tmp_, "eval --json --model '" + run + "' --data " + data);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(nlohmann::json::parse(plain.out).contains("bleu"));
  expect_error(run_attn(tmp_, "eval --model '" + run + "' --data " + data + " --metric rouge"), {"rouge"});
}

}  // namespace
}  // namespace attn::cli
