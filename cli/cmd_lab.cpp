// attn lab <demo>: the seeds' demonstrations as commands a learner runs and a teacher shows, each
// printing a table (and, where a picture helps, writing an SVG with --svg FILE): steps (Eq. 1 in
// five steps), scale (the sqrt(D) saturation table), permutation, masks, rope, kv-cache and
// memory. Each is a thin shell over a function returning the numbers (cli/lab_*.h, in attn_cli_lib
// because they use every layer from ops to models and the figures; nn/experiments.h), so the
// tests check the same computation the command prints.
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attn/core/error.h"
#include "attn/nn/experiments.h"
#include "attn/lab/kv_cache.h"
#include "attn/lab/memory.h"
#include "attn/lab/rope.h"
#include "attn/lab/steps.h"
#include "attn/lab/symmetry.h"
#include "attn/report/svg.h"
#include "commands.h"

namespace attn::cli {

namespace {

DType parse_float_dtype(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f64") return DType::F64;
  fail("lab", "unknown dtype '", name, "' (expected f32 or f64)");
}

// "3:1,10:8" -> {(3, 1), (10, 8)}.
std::vector<std::pair<int64_t, int64_t>> parse_pairs(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    const size_t colon = item.find(':');
    ATTN_CHECK(colon != std::string::npos, "lab rope", "--pairs wants m:n items separated by commas, got '", item,
               "' in '", text, "'");
    try {
      size_t used_m = 0, used_n = 0;
      const std::string ms = item.substr(0, colon), ns = item.substr(colon + 1);
      const long long m = std::stoll(ms, &used_m), n = std::stoll(ns, &used_n);
      ATTN_CHECK(used_m == ms.size() && used_n == ns.size(), "lab rope", "'", item, "' is not m:n");
      pairs.emplace_back(m, n);
    } catch (const std::logic_error&) {
      fail("lab rope", "'", item, "' is not m:n with integer positions");
    }
    start = end + 1;
  }
  return pairs;
}

// Prints `text` and, when `svg_path` is set, writes the figure built by `figure`.
template <class F>
int print_and_draw(const std::string& text, const std::string& svg_path, F figure) {
  std::fputs(text.c_str(), stdout);
  if (!svg_path.empty()) {
    report::save_text_file(svg_path, figure());
    std::printf("figure written to %s\n", svg_path.c_str());
  }
  return 0;
}

void add_svg(CLI::App* cmd, std::string& path) {
  cmd->add_option("--svg", path, "also write the figure to this SVG file");
}

struct ScaleOptions {
  std::vector<int64_t> dims = nn::kSeedScaleDims;
  int64_t seq = nn::kSeedScaleSeqLen;
  int64_t trials = 64;
  uint64_t seed = 0;
  std::string svg;
};

void register_steps(CLI::App* lab, Action* action) {
  auto o = std::make_shared<lab::StepsOptions>();
  auto svg = std::make_shared<std::string>();
  CLI::App* cmd = lab->add_subcommand("steps", "softmax(Q K^T / sqrt(d_k)) V in five steps, as matrices (seed 001)");
  cmd->add_option("--length", o->length, "tokens L (queries = keys)")->capture_default_str();
  cmd->add_option("--dk", o->d_k, "query/key/value dimension d_k")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed of Q, K, V")->capture_default_str()->check(seed_validator());
  add_svg(cmd, *svg);
  cmd->callback([o, svg, action] {
    *action = [o, svg] {
      const lab::StepsDemo d = lab::steps_demo(*o);
      return print_and_draw(lab::format_steps_demo(d), *svg, [&] { return lab::steps_figure(d); });
    };
  });
}

void register_scale(CLI::App* lab, Action* action) {
  auto o = std::make_shared<ScaleOptions>();
  CLI::App* cmd = lab->add_subcommand("scale", "the sqrt(D) saturation table: largest softmax weight with and without 1/sqrt(D)");
  cmd->add_option("--dims", o->dims, "query/key dimensions D (comma-separated)")->delimiter(',')->capture_default_str();
  cmd->add_option("--seq", o->seq, "queries and keys per trial")->capture_default_str();
  cmd->add_option("--trials", o->trials, "independent draws averaged per D")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str()->check(seed_validator());
  add_svg(cmd, o->svg);
  cmd->callback([o, action] {
    *action = [o] {
      const auto rows = nn::saturation_table(o->dims, o->seq, o->trials, o->seed);
      std::string text = "q, k ~ N(0, 1): mean over queries of the largest softmax weight (" +
                         std::to_string(o->seq) + " queries and keys, " + std::to_string(o->trials) + " trials)\n\n" +
                         nn::format_saturation_table(rows) +
                         "\nWithout the scale Var(q.k) = D and the softmax piles onto one key as D grows; with\n"
                         "1/sqrt(D) the variance stays near 1 and the weights stay spread for every D.\n";
      return print_and_draw(text, o->svg, [&] { return lab::scale_figure(rows); });
    };
  });
}

void register_permutation(CLI::App* lab, Action* action) {
  auto o = std::make_shared<lab::PermutationOptions>();
  CLI::App* cmd = lab->add_subcommand("permutation", "self-attention without positions is permutation-equivariant; PE breaks it");
  cmd->add_option("--d-model", o->d_model, "model dimension D")->capture_default_str();
  cmd->add_option("--heads", o->heads, "attention heads")->capture_default_str();
  cmd->add_option("--length", o->length, "tokens T")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed of weights, tokens and permutation")
      ->capture_default_str()
      ->check(seed_validator());
  cmd->callback([o, action] {
    *action = [o] {
      std::fputs(lab::format_permutation_demo(lab::permutation_demo(*o)).c_str(), stdout);
      return 0;
    };
  });
}

void register_masks(CLI::App* lab, Action* action) {
  auto o = std::make_shared<lab::MasksOptions>();
  auto svg = std::make_shared<std::string>();
  CLI::App* cmd = lab->add_subcommand("masks", "causal and padding masks: perturb the input, with and without the mask");
  cmd->add_option("--d-model", o->d_model, "model dimension D")->capture_default_str();
  cmd->add_option("--heads", o->heads, "attention heads")->capture_default_str();
  cmd->add_option("--length", o->length, "tokens T, real ones first, then PAD")->capture_default_str();
  cmd->add_option("--real", o->real, "real (non-PAD) tokens")->capture_default_str();
  cmd->add_option("--position", o->position, "the position the causal perturbation changes")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str()->check(seed_validator());
  add_svg(cmd, *svg);
  cmd->callback([o, svg, action] {
    *action = [o, svg] {
      const lab::MasksDemo d = lab::masks_demo(*o);
      return print_and_draw(lab::format_masks_demo(d), *svg, [&] { return lab::masks_figure(d); });
    };
  });
}

void register_rope(CLI::App* lab, Action* action) {
  auto o = std::make_shared<lab::RopeTableOptions>();
  auto pairing = std::make_shared<std::string>("interleaved");
  auto pairs = std::make_shared<std::string>();
  auto svg = std::make_shared<std::string>();
  CLI::App* cmd = lab->add_subcommand("rope", "RoPE: the q.k score depends only on the offset m - n");
  cmd->add_option("--dim", o->dim, "head dimension D (even)")->capture_default_str();
  cmd->add_option("--base", o->base, "RoPE base (theta_i = base^(-2i/D))")->capture_default_str();
  cmd->add_option("--pairing", *pairing, "feature pairs: interleaved (2i, 2i+1) or half (i, i + D/2)")
      ->capture_default_str();
  cmd->add_option("--pairs", *pairs, "query:key positions, comma-separated (default 3:1,10:8,52:50,52:49)");
  cmd->add_option("--grid", o->grid, "the figure shows positions 0 .. grid-1")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed of q and k")->capture_default_str()->check(seed_validator());
  add_svg(cmd, *svg);
  cmd->callback([o, pairing, pairs, svg, action] {
    *action = [o, pairing, pairs, svg] {
      o->pairing = parse_rope_pairing(*pairing);
      if (!pairs->empty()) o->pairs = parse_pairs(*pairs);
      const lab::RopeTable t = lab::rope_table(*o);
      return print_and_draw(lab::format_rope_table(t, *o), *svg, [&] { return lab::rope_figure(t, *o); });
    };
  });
}

void register_kv_cache(CLI::App* lab, Action* action) {
  auto o = std::make_shared<lab::KvCacheOptions>();
  auto dtype = std::make_shared<std::string>("f32");
  CLI::App* cmd = lab->add_subcommand("kv-cache", "decoding step by step with a KV cache equals the full causal pass");
  cmd->add_option("--steps", o->steps, "target positions to decode")->capture_default_str();
  cmd->add_option("--source-length", o->source_length, "source tokens")->capture_default_str();
  cmd->add_option("--dtype", *dtype, "f32 or f64")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed of weights and tokens")
      ->capture_default_str()
      ->check(seed_validator());
  cmd->callback([o, dtype, action] {
    *action = [o, dtype] {
      o->dtype = parse_float_dtype(*dtype);
      std::fputs(lab::format_kv_cache_demo(lab::kv_cache_demo(*o)).c_str(), stdout);
      return 0;
    };
  });
}

void register_memory(CLI::App* lab, Action* action) {
  auto o = std::make_shared<lab::MemoryOptions>();
  auto dtype = std::make_shared<std::string>("f32");
  CLI::App* cmd = lab->add_subcommand(
      "memory", "score-matrix memory and FLOPs of attention, FFN and model; what fused attention and a KV cache change");
  cmd->add_option("--seq", o->seq, "sequence length T (rows at T/8, T and 8T unless --lengths)")->capture_default_str();
  cmd->add_option("--heads", o->heads, "attention heads H")->capture_default_str();
  cmd->add_option("--dtype", *dtype, "f32 or f64")->capture_default_str();
  cmd->add_option("--layers", o->layers, "layers")->capture_default_str();
  cmd->add_option("--batch", o->batch, "sequences per batch")->capture_default_str();
  cmd->add_option("--d-model", o->d_model, "model dimension D (default 64 * heads)");
  cmd->add_option("--d-ff", o->d_ff, "FFN width (default 4 * D)");
  cmd->add_option("--lengths", o->lengths, "sequence lengths to tabulate (comma-separated)")->delimiter(',');
  cmd->callback([o, dtype, action] {
    *action = [o, dtype] {
      o->dtype = parse_float_dtype(*dtype);
      std::fputs(lab::format_memory_report(lab::memory_report(*o)).c_str(), stdout);
      return 0;
    };
  });
}

}  // namespace

void register_lab(CLI::App& app, Action* action) {
  CLI::App* lab = app.add_subcommand("lab", "the seeds' demonstrations: steps, scale, permutation, masks, rope, kv-cache, memory");
  lab->require_subcommand(1);
  register_steps(lab, action);
  register_scale(lab, action);
  register_permutation(lab, action);
  register_masks(lab, action);
  register_rope(lab, action);
  register_kv_cache(lab, action);
  register_memory(lab, action);
}

}  // namespace attn::cli
