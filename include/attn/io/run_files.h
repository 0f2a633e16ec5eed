// attn/io/run_files.h — the names of the files a model folder and a training run folder hold,
// declared once for the model loader, the trainer, the run layer and the command line.
// Not here: what the files contain (models/checkpoint.h, io/vocab.h, train/checkpointing.h).
#pragma once

namespace attn::io {

// Every model folder: the model's configuration and its weights.
inline constexpr const char* kConfigFileName = "config.json";
inline constexpr const char* kWeightsFileName = "model.safetensors";
// The vocabulary (vocab.json) and, for a SentencePiece vocabulary, its model next to it.
inline constexpr const char* kVocabFileName = "vocab.json";
inline constexpr const char* kSentencePieceFileName = "sentencepiece.model";
// A training run's records: its configuration and one metrics line per epoch.
inline constexpr const char* kTrainConfigFileName = "train_config.json";
inline constexpr const char* kMetricsFileName = "metrics.jsonl";
// A training run's checkpoints (each a folder) and what a checkpoint adds to a model folder.
inline constexpr const char* kCheckpointsDirName = "checkpoints";
inline constexpr const char* kOptimizerFileName = "optimizer.safetensors";
inline constexpr const char* kStateFileName = "state.json";

}  // namespace attn::io
