// What the trainer tests share: the tiny copy-task run (a model that learns in about a second)
// and a model's weights as plain vectors for exact comparisons.
#pragma once

#include <vector>

#include "attn/models/model.h"
#include "attn/train/train_config.h"

namespace attn::train::test_util {

// The tiny model of the trainer tests: D=16, 2 heads, 1+1 layers, d_ff 32, dropout 0.1 (the
// architecture and attention dropout are left to the caller).
inline void make_tiny(models::ModelConfig& m) {
  m.d_model = 16;
  m.n_heads = 2;
  m.n_encoder_layers = 1;
  m.n_decoder_layers = 1;
  m.d_ff = 32;
  m.dropout = 0.1;
}

// Copy 4 symbols of an alphabet of 4: 256 training pairs, batches of 16 (16 steps per epoch),
// D=16, 2 heads, 1+1 layers, dropout on (so that generator state matters), one thread.
inline TrainConfig tiny_config() {
  TrainConfig c;
  c.task = "copy";
  c.length = 4;
  c.symbols = 4;
  c.train_size = 256;
  c.valid_size = 32;
  make_tiny(c.model);
  c.model.attention_dropout = 0.1;
  c.epochs = 2;
  c.batch_size = 16;
  c.schedule = ScheduleKind::Constant;
  c.lr = 0.01;
  c.warmup = 10;
  c.threads = 1;
  c.seed = 3;
  return c;
}

// Every parameter's values, in named_parameters() order.
inline std::vector<std::vector<float>> weights_of(const models::Model& m) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p.to_vector<float>());
  return out;
}

}  // namespace attn::train::test_util
