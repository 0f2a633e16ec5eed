// serve/explorer.cpp — see attn/serve/explorer.h. The lab's numbers are the library's own: Q K^T
// by the matmul op, the weights and the output by scaled_dot_product_attention (float64) with
// scale = 1 / tau, its causal flag and its key-padding mask; the model's weights are what
// run::capture_attention and run::capture_self_attention read from the model's modules.
#include "attn/serve/explorer.h"

#include <cmath>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/core/rng.h"
#include "attn/io/bpe.h"
#include "attn/ops/attention.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/norm.h"
#include "attn/nn/positional.h"
#include "attn/ops/ops.h"
#include "attn/model_figures/model_figures.h"
#include "attn/run/attention.h"
#include "attn/run/token_codec.h"
#include "attn/run/translate.h"
#include "attn/serve/api.h"

namespace attn::serve {

namespace {

using nlohmann::json;

// A [rows][cols] array of finite numbers, 1..max_rows rows of 1..max_cols numbers each, all rows
// of one length.
std::vector<std::vector<double>> read_matrix(const json& j, const std::string& field, int64_t max_rows,
                                             int64_t max_cols) {
  if (!j.is_array() || j.empty())
    throw invalid(field, str_cat(field, " must be a non-empty list of rows (lists of numbers)"), "invalid_type");
  if (static_cast<int64_t>(j.size()) > max_rows)
    throw invalid(field, str_cat(field, " has ", j.size(), " rows, more than the ", max_rows, " the lab allows"));
  std::vector<std::vector<double>> m;
  for (const json& row : j) {
    if (!row.is_array() || row.empty())
      throw invalid(field, str_cat("each row of ", field, " must be a non-empty list of numbers"), "invalid_type");
    if (static_cast<int64_t>(row.size()) > max_cols)
      throw invalid(field, str_cat("a row of ", field, " has ", row.size(), " numbers, more than the ", max_cols,
                                   " the lab allows"));
    if (!m.empty() && row.size() != m.front().size())
      throw invalid(field, str_cat("the rows of ", field, " differ in length (", m.front().size(), " and ",
                                   row.size(), ")"));
    std::vector<double> r;
    for (const json& x : row) {
      if (!x.is_number()) throw invalid(field, str_cat(field, " holds ", x.dump(), ", not a number"), "invalid_type");
      const double v = x.get<double>();
      if (!std::isfinite(v)) throw invalid(field, str_cat(field, " holds a value that is not finite"));
      r.push_back(v);
    }
    m.push_back(std::move(r));
  }
  return m;
}

int64_t read_size(const json& j, const char* field, int64_t fallback, int64_t max) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) throw invalid(field, str_cat(field, " must be an integer"), "invalid_type");
  const int64_t v = it->get<int64_t>();
  if (v < 1 || v > max) throw invalid(field, str_cat(field, " must be in [1, ", max, "], got ", v));
  return v;
}

bool read_bool(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return false;
  if (!it->is_boolean()) throw invalid(field, str_cat(field, " must be true or false"), "invalid_type");
  return it->get<bool>();
}

// N(0, 1) draws rounded to one decimal, as `attn lab steps` draws its matrices.
std::vector<std::vector<double>> rounded_normal(int64_t rows, int64_t cols, Rng& rng) {
  std::vector<std::vector<double>> m(static_cast<size_t>(rows), std::vector<double>(static_cast<size_t>(cols)));
  for (auto& row : m)
    for (double& x : row) x = std::round(rng.normal() * 10.0) / 10.0 + 0.0;  // + 0.0: no "-0.0"
  return m;
}

Tensor to_tensor(const std::vector<std::vector<double>>& m, const Shape& shape) {
  std::vector<double> flat;
  for (const auto& row : m) flat.insert(flat.end(), row.begin(), row.end());
  return Tensor::from_vector<double>(flat, shape);
}

// A row-major [rows, cols] vector as nested arrays.
json nested(const std::vector<double>& v, int64_t rows, int64_t cols) {
  json out = json::array();
  for (int64_t r = 0; r < rows; ++r) {
    json row = json::array();
    for (int64_t c = 0; c < cols; ++c) row.push_back(v[static_cast<size_t>(r * cols + c)]);
    out.push_back(std::move(row));
  }
  return out;
}

// One stack's weights of batch row 0 as [layer][head][query][key].
json stack_json(const std::vector<run::AttentionWeights>& stack) {
  json layers = json::array();
  for (const run::AttentionWeights& w : stack) {
    json heads = json::array();
    for (int64_t h = 0; h < w.heads; ++h) {
      json rows = json::array();
      for (int64_t q = 0; q < w.queries; ++q) {
        json row = json::array();
        for (int64_t k = 0; k < w.keys; ++k) row.push_back(w.at(0, h, q, k));
        rows.push_back(std::move(row));
      }
      heads.push_back(std::move(rows));
    }
    layers.push_back(std::move(heads));
  }
  return layers;
}

json labels(const TextCodec& codec, const std::vector<int64_t>& ids) {
  json out = json::array();
  for (int64_t id : ids) out.push_back(io::utf8_replace_invalid(codec.piece(id)));
  return out;
}

std::vector<int64_t> encode_field(const TextCodec& codec, const std::string& text, const char* field) {
  try {
    return codec.encode(text);
  } catch (const Error& e) {
    throw invalid(field, e.what());
  }
}

}  // namespace

json lab_attention(const json& j) {
  const bool given = j.contains("q") || j.contains("k") || j.contains("v");
  std::vector<std::vector<double>> q, k, v;
  if (given) {
    for (const char* f : {"q", "k", "v"})
      if (!j.contains(f)) throw invalid(f, "give q, k and v together (or none of them, for random ones)",
                                        "missing_required_parameter");
    for (const char* f : {"queries", "keys", "dim", "seed"})
      if (j.contains(f)) throw invalid(f, str_cat(f, " is for random matrices; q, k and v are given"));
    q = read_matrix(j["q"], "q", kLabMaxTokens, kLabMaxDim);
    k = read_matrix(j["k"], "k", kLabMaxTokens, kLabMaxDim);
    v = read_matrix(j["v"], "v", kLabMaxTokens, kLabMaxDim);
    if (q.front().size() != k.front().size())
      throw invalid("k", str_cat("q and k must have rows of one length (d_k), got ", q.front().size(), " and ",
                                 k.front().size()));
    if (v.size() != k.size())
      throw invalid("v", str_cat("v must have one row per key (", k.size(), "), got ", v.size()));
  } else {
    const int64_t T = read_size(j, "queries", 4, kLabMaxTokens);
    const int64_t S = read_size(j, "keys", T, kLabMaxTokens);
    const int64_t D = read_size(j, "dim", 4, kLabMaxDim);
    uint64_t seed = 0;
    if (auto it = j.find("seed"); it != j.end() && !it->is_null()) {
      if (!it->is_number_unsigned()) throw invalid("seed", "seed must be a non-negative integer", "invalid_type");
      seed = it->get<uint64_t>();
    }
    Rng rng(seed);
    q = rounded_normal(T, D, rng);
    k = rounded_normal(S, D, rng);
    v = rounded_normal(S, D, rng);
  }
  const int64_t T = static_cast<int64_t>(q.size()), S = static_cast<int64_t>(k.size());
  const int64_t D = static_cast<int64_t>(q.front().size()), Dv = static_cast<int64_t>(v.front().size());

  double tau = std::sqrt(static_cast<double>(D));
  if (auto it = j.find("tau"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) throw invalid("tau", "tau must be a number", "invalid_type");
    tau = it->get<double>();
    if (!(std::isfinite(tau) && tau >= 1e-3 && tau <= 1e3)) throw invalid("tau", str_cat("tau must be in [0.001, 1000], got ", tau));
  }
  const bool causal = read_bool(j, "causal");
  std::vector<int> pad(static_cast<size_t>(S), 0);
  json pad_list = json::array();
  if (auto it = j.find("pad"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw invalid("pad", "pad must be a list of key indices", "invalid_type");
    for (const json& x : *it) {
      if (!x.is_number_integer()) throw invalid("pad", str_cat("pad holds ", x.dump(), ", not a key index"), "invalid_type");
      const int64_t i = x.get<int64_t>();
      if (i < 0 || i >= S) throw invalid("pad", str_cat("pad holds key ", i, ", outside [0, ", S, ")"));
      pad[static_cast<size_t>(i)] = 1;
    }
  }
  for (int64_t i = 0; i < S; ++i)
    if (pad[static_cast<size_t>(i)]) pad_list.push_back(i);

  NoGradGuard no_grad;
  const Tensor tq = to_tensor(q, {T, D}), tk = to_tensor(k, {S, D}), tv = to_tensor(v, {S, Dv});
  const Tensor scores = matmul(tq, transpose(tk, 0, 1));  // [T, S]
  const Tensor scaled = scale(scores, 1.0 / tau);        // [T, S]
  SdpaOptions o;
  o.scale = 1.0 / tau;
  o.causal = causal;
  o.need_weights = true;
  o.key_padding_mask = Tensor::from_bools(pad, {1, S});
  const SdpaResult r = scaled_dot_product_attention(reshape(tq, {1, 1, T, D}), reshape(tk, {1, 1, S, D}),
                                                    reshape(tv, {1, 1, S, Dv}), o);
  const std::vector<double> s = scores.to_vector<double>(), sc = scaled.to_vector<double>();
  json scaled_json = json::array(), masked_json = json::array();
  for (int64_t i = 0; i < T; ++i) {
    json row = json::array(), mrow = json::array();
    for (int64_t c = 0; c < S; ++c) {
      const bool m = pad[static_cast<size_t>(c)] || (causal && c > i + (S - T));
      mrow.push_back(m);
      row.push_back(m ? json(nullptr) : json(sc[static_cast<size_t>(i * S + c)]));
    }
    scaled_json.push_back(std::move(row));
    masked_json.push_back(std::move(mrow));
  }
  return {{"object", "lab.attention"},
          {"q", q},
          {"k", k},
          {"v", v},
          {"tau", tau},
          {"causal", causal},
          {"pad", pad_list},
          {"scores", nested(s, T, S)},
          {"scaled", scaled_json},
          {"masked", masked_json},
          {"weights", nested(r.weights.to_vector<double>(), T, S)},
          {"output", nested(r.out.contiguous().to_vector<double>(), T, Dv)}};
}

AttentionRequest parse_attention_request(const json& j) {
  AttentionRequest r;
  auto input = j.find("input");
  if (input == j.end() || !input->is_string())
    throw invalid("input", "input must be a string", input == j.end() ? "missing_required_parameter" : "invalid_type");
  r.input = input->get<std::string>();
  if (auto out = j.find("output"); out != j.end() && !out->is_null()) {
    if (!out->is_string()) throw invalid("output", "output must be a string", "invalid_type");
    r.output = out->get<std::string>();
  }
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "input" && it.key() != "output" && it.key() != "model")
      throw invalid(it.key(), str_cat("unknown field '", it.key(), "' (input, output and model are)"), "unknown_parameter");
  return r;
}

json model_attention(const run::GenerationFolder& opened, const TextCodec& codec, const AttentionRequest& r) {
  const run::ModelFolder& folder = opened.folder;
  const models::ModelConfig& config = folder.base->config();
  const int64_t max_len = config.max_len;
  const std::vector<int64_t> input = encode_field(codec, r.input, "input");
  for (int64_t id : input)
    if (id < 0 || id >= folder.src_vocab_size)
      throw invalid("input", str_cat("the input holds token id ", id, ", outside the vocabulary"));
  std::vector<int64_t> output;
  if (r.output && !r.output->empty()) output = encode_field(codec, *r.output, "output");
  for (int64_t id : output)
    if (id < 0 || id >= folder.tgt_vocab_size || id == folder.pad)
      throw invalid("output", str_cat("the output holds token id ", id, ", outside the vocabulary or <pad>"));
  json out = {{"object", "attention"}, {"family", models::arch_name(config.arch)}};
  NoGradGuard no_grad;
  try {
    if (config.arch == models::Arch::EncoderDecoder) {
      if (static_cast<int64_t>(input.size()) > max_len)
        throw invalid("input", str_cat("the input has ", input.size(), " tokens, more than the ", max_len,
                                       " the model accepts"), "context_length_exceeded");
      if (!r.output) {
        run::SearchSettings greedy;
        greedy.max_len = max_len;
        output = run::search_batch(folder, {input}, greedy).front().front().tokens;
      }
      if (static_cast<int64_t>(output.size()) + 1 > max_len)
        throw invalid("output", str_cat("the output has ", output.size(), " tokens; the decoder reads at most ",
                                        max_len, " positions"), "context_length_exceeded");
      std::vector<int64_t> dec_in{folder.bos};
      dec_in.insert(dec_in.end(), output.begin(), output.end());
      const run::CapturedAttention c =
          run::capture_attention(folder, run::pad_batch({input}, folder.pad), run::pad_batch({dec_in}, folder.pad));
      out["source_tokens"] = labels(codec, input);
      out["target_tokens"] = labels(codec, dec_in);
      out["attention"] = {{"encoder_self", stack_json(c.encoder_self)},
                          {"decoder_self", stack_json(c.decoder_self)},
                          {"cross", stack_json(c.cross)}};
    } else {
      std::vector<int64_t> ids;
      if (config.arch == models::Arch::DecoderOnly && opened.prepend_bos) ids.push_back(folder.bos);
      ids.insert(ids.end(), input.begin(), input.end());
      if (config.arch == models::Arch::EncoderOnly && !output.empty())
        throw invalid("output", "an encoder-only model has no output to teacher-force");
      ids.insert(ids.end(), output.begin(), output.end());
      if (static_cast<int64_t>(ids.size()) > max_len)
        throw invalid("input", str_cat("the input and output make ", ids.size(), " positions, more than the ",
                                       max_len, " the model accepts"), "context_length_exceeded");
      const run::CapturedAttention c = run::capture_self_attention(folder, run::pad_batch({ids}, folder.pad));
      out["tokens"] = labels(codec, ids);
      out["attention"] = {{"self", stack_json(c.self)}};
    }
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw invalid(r.output ? "output" : "input", e.what());
  }
  out["output"] = codec.decode(output);
  out["output_tokens"] = labels(codec, output);
  return out;
}

std::string model_figure(const run::GenerationFolder& opened, const TextCodec& codec, const std::string& name,
                         int64_t tokens, const std::optional<std::string>& input) {
  const run::ModelFolder& folder = opened.folder;
  const models::ModelConfig& c = folder.base->config();
  if (name == "architecture") return model_figures::architecture_svg(folder);
  if (name == "multihead") return model_figures::multihead_svg(c, tokens);
  if (name == "steps") {
    if (!input) throw invalid("input", "the steps figure needs an input (?input=TEXT)", "missing_required_parameter");
    std::vector<int64_t> ids;
    if (c.arch == models::Arch::DecoderOnly && opened.prepend_bos) ids.push_back(folder.bos);
    for (int64_t id : encode_field(codec, *input, "input")) {
      if (id < 0 || id >= folder.src_vocab_size)
        throw invalid("input", str_cat("the input holds token id ", id, ", outside the vocabulary"));
      ids.push_back(id);
    }
    if (ids.empty()) throw invalid("input", "the input has no tokens");
    std::vector<std::string> names;
    for (int64_t id : ids) names.push_back(io::utf8_replace_invalid(codec.piece(id)));
    NoGradGuard no_grad;
    try {
      return model_figures::attention_steps_svg(folder, ids, names).svg;
    } catch (const Error& e) {
      throw invalid("input", e.what());
    }
  }
  throw ApiError(404, "not_found_error", str_cat("no figure '", name, "' (architecture, multihead and steps are)"),
                 std::nullopt, std::string("not_found"));
}

}  // namespace attn::serve
