// translate MODEL_DIR < sources.txt — a program outside the attn tree, on its public headers
// only: it opens a model folder (what `attn train` writes), translates every line of stdin with
// greedy search (the lines `attn translate --model MODEL_DIR` prints), then prints the
// cross-attention of one head (the last decoder layer's first head) for the first line as a
// table: one row per output token (the position that predicted it), one column per source token.
// Not here: beam search or batching options (see `attn translate --help` for those).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "attn/io/lines.h"
#include "attn/run/attention.h"
#include "attn/run/model_folder.h"
#include "attn/run/token_codec.h"
#include "attn/run/translate.h"

namespace {

// Prints weights[query][key] with the output tokens as row labels and the source as columns.
void print_table(const attn::run::HeadWeights& weights, const std::vector<std::string>& rows,
                 const std::vector<std::string>& cols) {
  std::printf("%8s", "");
  for (const std::string& c : cols) std::printf(" %6.6s", c.c_str());
  std::printf("\n");
  for (size_t q = 0; q < weights.size() && q < rows.size(); ++q) {
    std::printf("%8.8s", rows[q].c_str());
    for (double w : weights[q]) std::printf(" %6.3f", w);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR < sources.txt\n", argv[0]);
    return 2;
  }
  try {
    using namespace attn;
    const run::ModelFolder folder = run::open_model_folder(argv[1], "translate", false);
    run::TokenCodec codec;  // text through vocab.json, or token ids when the folder has none
    codec.vocab = folder.vocab ? &*folder.vocab : nullptr;
    codec.vocab_size = folder.src_vocab_size;
    codec.pad = folder.pad;
    codec.command = "translate";

    // Read every source, then translate in batches of 32 as `attn translate` does from a pipe.
    std::vector<std::vector<int64_t>> sources;
    io::LineReader reader(std::cin);
    std::string line;
    while (reader.next(line)) sources.push_back(codec.read(line, reader.line_number(), "source"));
    if (sources.empty()) return 0;
    const run::SearchSettings greedy;  // beam 1: greedy search, at most source length + 50 tokens
    std::vector<decode::Hypothesis> outputs;
    for (size_t start = 0; start < sources.size(); start += 32) {
      const std::vector<std::vector<int64_t>> batch(sources.begin() + static_cast<std::ptrdiff_t>(start),
                                                    sources.begin() + static_cast<std::ptrdiff_t>(
                                                                          std::min(sources.size(), start + 32)));
      for (const auto& best : run::search_batch(folder, batch, greedy)) outputs.push_back(best.front());
    }
    for (const decode::Hypothesis& h : outputs) std::printf("%s\n", codec.write(h.tokens).c_str());

    // The first line's cross-attention: the decoder reads BOS + output; when the output ended
    // with EOS its last row is the position that predicted EOS.
    const decode::Hypothesis& first = outputs.front();
    std::vector<int64_t> fed = first.tokens, predicted = first.tokens;
    if (first.finished)
      predicted.push_back(folder.eos);
    else if (!fed.empty())
      fed.pop_back();  // the last token of a cut output was never fed back
    const auto layers = run::cross_attention(folder, sources.front(), fed);
    std::vector<std::string> rows = codec.labels(predicted);
    if (first.finished && !folder.vocab) rows.back() = "EOS";
    std::printf("\ncross-attention of line 1, decoder layer %zu, head 1 (rows: output, columns: source)\n",
                layers.size());
    print_table(layers.back().front(), rows, codec.labels(sources.front()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
