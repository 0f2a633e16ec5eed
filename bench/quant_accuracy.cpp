// bench/quant_accuracy.cpp — what int8 and bf16 weights cost a decoder-only language model in
// accuracy, measured on held-out text: the model folder's float32 weights against copies
// quantized in memory (Model::quantize, the same code as `attn quantize`). For every line of the
// text ([BOS] line -> line [EOS], teacher-forced, the same tokens as `attn eval --text`) and
// every position: the cross-entropy of the next token under each model (perplexity), KL(p32 ||
// pq) of the next-token distributions, and whether the argmax agrees with float32's.
//   quant_accuracy --model DIR --text FILE [--lines N] [--threads N]
// Prints one table row per dtype (and a JSON line per dtype with --json). No Google Benchmark:
// these are accuracy figures, not timings.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/models/decoder_only.h"
#include "attn/ops/quantize.h"
#include "attn/ops/threads.h"
#include "attn/run/model_folder.h"
#include "attn/train/text_data.h"

namespace {

using namespace attn;

struct Totals {
  double nll = 0, kl = 0;
  int64_t positions = 0, agree = 0;
};

// log-softmax of one row of V logits, in double.
void log_softmax(const float* z, int64_t V, std::vector<double>& out) {
  double m = -INFINITY;
  for (int64_t v = 0; v < V; ++v) m = std::max(m, static_cast<double>(z[v]));
  double s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(z[v]) - m);
  const double lse = m + std::log(s);
  out.resize(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) out[static_cast<size_t>(v)] = static_cast<double>(z[v]) - lse;
}

int64_t argmax(const std::vector<double>& x) {
  int64_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, text;
  int64_t max_lines = 0;
  int threads = 0;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "quant_accuracy: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model_dir = value();
    else if (a == "--text") text = value();
    else if (a == "--lines") max_lines = std::atoll(value().c_str());
    else if (a == "--threads") threads = std::atoi(value().c_str());
    else if (a == "--json") json = true;
    else {
      std::fprintf(stderr, "usage: quant_accuracy --model DIR --text FILE [--lines N] [--threads N] [--json]\n");
      return 2;
    }
  }
  if (model_dir.empty() || text.empty()) {
    std::fprintf(stderr, "usage: quant_accuracy --model DIR --text FILE [--lines N] [--threads N] [--json]\n");
    return 2;
  }
  try {
    if (threads > 0) set_num_threads(threads);
    NoGradGuard no_grad;
    const Quantization kinds[] = {Quantization::None, Quantization::Int8, Quantization::BF16};
    std::vector<run::ModelFolder> folders;
    for (Quantization q : kinds) {
      folders.push_back(run::open_model_folder(model_dir, "quant_accuracy", true, models::Arch::DecoderOnly));
      if (q != Quantization::None) folders.back().base->quantize(q);
    }
    const io::Vocab& vocab = *folders[0].vocab;
    const train::TextFile file = train::read_text(text, vocab.tokenization());
    auto lines = train::encode_text(file, vocab, true);
    if (max_lines > 0 && static_cast<int64_t>(lines.size()) > max_lines) lines.resize(static_cast<size_t>(max_lines));
    const int64_t bos = folders[0].bos, eos = folders[0].eos;
    Totals totals[3];
    std::vector<double> ref, got;
    for (const auto& ids : lines) {
      std::vector<int64_t> in{bos};
      in.insert(in.end(), ids.begin(), ids.end());
      std::vector<int64_t> target(ids.begin(), ids.end());
      target.push_back(eos);
      const int64_t T = static_cast<int64_t>(in.size());
      const Tensor x = Tensor::from_vector(in, {1, T});
      Tensor logits[3];
      for (int k = 0; k < 3; ++k)
        logits[k] = dynamic_cast<models::DecoderOnlyModel&>(*folders[static_cast<size_t>(k)].base).forward(x);
      const int64_t V = logits[0].size(2);
      for (int64_t t = 0; t < T; ++t) {
        log_softmax(logits[0].data<float>() + t * V, V, ref);
        const int64_t top = argmax(ref);
        for (int k = 0; k < 3; ++k) {
          log_softmax(logits[k].data<float>() + t * V, V, got);
          Totals& s = totals[k];
          s.nll -= got[static_cast<size_t>(target[static_cast<size_t>(t)])];
          double kl = 0;
          for (int64_t v = 0; v < V; ++v) kl += std::exp(ref[static_cast<size_t>(v)]) * (ref[static_cast<size_t>(v)] - got[static_cast<size_t>(v)]);
          s.kl += kl;
          s.agree += argmax(got) == top ? 1 : 0;
          ++s.positions;
        }
      }
    }
    std::printf("%s on %s: %zu lines, %lld positions\n", model_dir.c_str(), text.c_str(), lines.size(),
                static_cast<long long>(totals[0].positions));
    std::printf("%-6s %12s %12s %14s %12s\n", "dtype", "perplexity", "ppl delta", "mean KL", "top-1 agree");
    const double ppl32 = std::exp(totals[0].nll / static_cast<double>(totals[0].positions));
    for (int k = 0; k < 3; ++k) {
      const Totals& s = totals[k];
      const double n = static_cast<double>(s.positions);
      const double ppl = std::exp(s.nll / n);
      std::printf("%-6s %12.6f %+11.4f%% %14.3e %11.4f%%\n", k == 0 ? "f32" : quantization_name(kinds[k]), ppl,
                  100.0 * (ppl / ppl32 - 1.0), s.kl / n, 100.0 * static_cast<double>(s.agree) / n);
      if (json)
        std::printf("{\"dtype\": \"%s\", \"perplexity\": %.9g, \"ppl_delta\": %.9g, \"mean_kl\": %.9g, \"top1_agree\": %.9g}\n",
                    k == 0 ? "f32" : quantization_name(kinds[k]), ppl, ppl / ppl32 - 1.0, s.kl / n,
                    static_cast<double>(s.agree) / n);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quant_accuracy: %s\n", e.what());
    return 1;
  }
  return 0;
}
