// bench/dist_bench.cpp — data-parallel training speed: steps/s of the seed's model (reverse
// digits, ModelConfig::seed_small) with a fixed per-rank batch, one thread per rank, and the
// share of each step spent in communication (inside MPI calls: the bucketed gradient
// all-reduce and the two one-number collectives). Run by bench/dist_bench.sh for 1 and 2 ranks
// (`mpirun -np N build/dist_bench`). Not here: the trainer's data pipeline, validation or
// checkpoints (the training step alone is timed), nor any PyTorch comparison.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attn/dist/gradient_reducer.h"
#include "attn/dist/sharding.h"
#include "attn/models/encoder_decoder.h"
#include "attn/ops/ops.h"
#include "attn/ops/threads.h"
#include "attn/train/adam.h"
#include "attn/train/batching.h"

namespace {

using namespace attn;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Options {
  int64_t steps = 40;       // timed steps
  int64_t warmup = 5;       // untimed steps first
  int64_t batch = 32;       // examples per rank and step
  int threads = 1;          // per rank
  double bucket_mb = 0.25;  // the seed model (0.9 MB of gradients) then has 4 buckets
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--steps") o.steps = std::atoll(v);
    else if (k == "--warmup") o.warmup = std::atoll(v);
    else if (k == "--batch") o.batch = std::atoll(v);
    else if (k == "--threads") o.threads = std::atoi(v);
    else if (k == "--bucket-mb") o.bucket_mb = std::atof(v);
    else {
      std::fprintf(stderr, "dist_bench: unknown option %s (--steps --warmup --batch --threads --bucket-mb)\n", k.c_str());
      std::exit(2);
    }
  }
  if (o.steps < 1 || o.warmup < 0 || o.batch < 1 || o.threads < 1 || o.bucket_mb <= 0) {
    std::fprintf(stderr, "dist_bench: every option must be positive\n");
    std::exit(2);
  }
  return o;
}

// Reverse-digits examples (8 symbols, ids 4..13 as the task vocabulary's), the same on every rank.
std::vector<io::Example> reverse_examples(int64_t n) {
  Rng rng(1706);
  std::vector<io::Example> out;
  for (int64_t i = 0; i < n; ++i) {
    io::Example e;
    for (int k = 0; k < 8; ++k) e.src.push_back(4 + static_cast<int64_t>(rng.below(10)));
    e.tgt.assign(e.src.rbegin(), e.src.rend());
    out.push_back(e);
  }
  return out;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  attn::set_num_threads(o.threads);
  const dist::Communicator& world = dist::Communicator::world();
  const int rank = world.rank(), size = world.size();

  models::ModelConfig config = models::ModelConfig::seed_small();
  config.src_vocab_size = config.tgt_vocab_size = 14;
  models::EncoderDecoderModel model(config);
  dist::broadcast_parameters(model.parameters(), world);
  train::Adam adam(model.parameters());
  dist::GradientReducer reducer(model.parameters(), world, {o.bucket_mb, dist::Reduction::Sum});

  const int64_t global_batch = o.batch * size, total = o.warmup + o.steps;
  const std::vector<io::Example> data = reverse_examples(global_batch * total);
  double step_seconds = 0, collective_seconds = 0;
  for (int64_t s = 0; s < total; ++s) {
    if (s == o.warmup) {
      world.barrier();
      reducer.reset_stats();
      step_seconds = collective_seconds = 0;
    }
    const Clock::time_point t0 = Clock::now();
    std::vector<int64_t> batch;
    for (int64_t i = 0; i < global_batch; ++i) batch.push_back(s * global_batch + i);
    const train::Batch b = train::make_batch(data, dist::shard(batch, rank, size));
    Clock::time_point tc = Clock::now();
    const dist::TokenShare share = dist::share_tokens(b.n_tgt_tokens, world);
    collective_seconds += since(tc);
    const Tensor logits = model.forward(b.src, b.tgt_in);  // [B, T, V]
    const int64_t rows = logits.size(0) * logits.size(1), V = logits.size(2);
    const Tensor loss = cross_entropy(logits.reshape({rows, V}), b.tgt_out.reshape({rows}), 0, 0.1);
    reducer.backward(scale(loss, share.weight()));
    reducer.wait_all();
    tc = Clock::now();
    dist::global_mean(loss.item(), share, world);
    collective_seconds += since(tc);
    train::clip_grad_norm(adam.params(), 1.0);
    adam.step(1e-3);
    adam.zero_grad();
    step_seconds += since(t0);
  }
  // The slowest rank sets the pace; report its times.
  const double seconds = world.all_reduce_value(step_seconds, dist::ReduceOp::Max);
  const dist::ReducerStats& st = reducer.stats();
  const double comm = world.all_reduce_value(st.comm_seconds + collective_seconds, dist::ReduceOp::Max);
  const double wait = world.all_reduce_value(st.wait_seconds, dist::ReduceOp::Max);
  if (rank == 0) {
    std::printf(
        "{\"ranks\": %d, \"threads_per_rank\": %d, \"per_rank_batch\": %lld, \"steps\": %lld, "
        "\"parameters\": %lld, \"buckets\": %zu, \"steps_per_s\": %.3f, \"examples_per_s\": %.1f, "
        "\"comm_share\": %.4f, \"wait_share\": %.4f, \"buckets_started_in_backward\": %lld, "
        "\"bytes_per_step\": %lld}\n",
        size, o.threads, static_cast<long long>(o.batch), static_cast<long long>(o.steps),
        static_cast<long long>(model.num_parameters()), reducer.buckets().size(),
        static_cast<double>(o.steps) / seconds, static_cast<double>(o.steps * global_batch) / seconds,
        comm / seconds, wait / seconds, static_cast<long long>(st.buckets_started_in_backward),
        static_cast<long long>(st.bytes_reduced / o.steps));
  }
  dist::finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const attn::Error& e) {
    attn::dist::abort_job(e.what());
  }
}
