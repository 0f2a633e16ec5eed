// bench/alloc_bench.cpp — allocations, bytes, page faults and wall time per training step of
// the demo's model (`attn train --task reverse`: D=64, 4 heads, 2+2 layers, batch 64), read
// around each step of the real Trainer loop. The executable interposes glibc's malloc family
// (forwarding to __libc_malloc & co.), so every allocation of the process counts: tensor
// storage (aligned_alloc) apart from the rest; the storage cache's own counters tell how many
// tensor-storage requests it served from freed blocks. Prints a table and one JSON line.
// Not here: the time per op (bench/alloc_profile.py runs perf on this binary).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "attn/core/storage.h"
#include "attn/train/trainer.h"
#include "kernels/simd/isa.h"

// ---- the malloc interposer ---------------------------------------------------------------

extern "C" {
void* __libc_malloc(size_t n);
void* __libc_calloc(size_t count, size_t n);
void* __libc_realloc(void* p, size_t n);
void* __libc_memalign(size_t alignment, size_t n);
void __libc_free(void* p);
}

namespace {

// Counters of every allocation in the process (relaxed atomics: OpenMP threads allocate too).
struct Counters {
  std::atomic<uint64_t> calls{0}, bytes{0};                  // all allocation calls
  std::atomic<uint64_t> aligned_calls{0}, aligned_bytes{0};  // aligned_alloc: tensor storage
  std::atomic<uint64_t> frees{0};
  std::atomic<uint64_t> size_class[4] = {};  // < 1 KiB, < 64 KiB, < 1 MiB, >= 1 MiB
};
Counters g_counters;

void count(size_t n, bool aligned) {
  g_counters.calls.fetch_add(1, std::memory_order_relaxed);
  g_counters.bytes.fetch_add(n, std::memory_order_relaxed);
  if (aligned) {
    g_counters.aligned_calls.fetch_add(1, std::memory_order_relaxed);
    g_counters.aligned_bytes.fetch_add(n, std::memory_order_relaxed);
  }
  const int cls = n < 1024 ? 0 : n < 65536 ? 1 : n < (1u << 20) ? 2 : 3;
  g_counters.size_class[cls].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

extern "C" {
void* malloc(size_t n) noexcept {
  count(n, false);
  return __libc_malloc(n);
}
void* calloc(size_t count_, size_t n) noexcept {
  count(count_ * n, false);
  return __libc_calloc(count_, n);
}
void* realloc(void* p, size_t n) noexcept {
  count(n, false);
  return __libc_realloc(p, n);
}
void* aligned_alloc(size_t alignment, size_t n) noexcept {
  count(n, true);
  return __libc_memalign(alignment, n);
}
void* memalign(size_t alignment, size_t n) noexcept {
  count(n, false);
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, size_t alignment, size_t n) noexcept {
  count(n, false);
  void* p = __libc_memalign(alignment, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) noexcept {
  if (p) g_counters.frees.fetch_add(1, std::memory_order_relaxed);
  __libc_free(p);
}
}

namespace attn::bench {
namespace {

struct Snapshot {
  uint64_t calls, bytes, aligned_calls, aligned_bytes, frees, cls[4];
  uint64_t storage_hits, storage_misses;  // the storage cache's counters
  long minflt, majflt;
  double seconds;
  bool first_of_epoch;

  static Snapshot take() {
    Snapshot s{};
    s.calls = g_counters.calls.load();
    s.bytes = g_counters.bytes.load();
    s.aligned_calls = g_counters.aligned_calls.load();
    s.aligned_bytes = g_counters.aligned_bytes.load();
    s.frees = g_counters.frees.load();
    for (int i = 0; i < 4; ++i) s.cls[i] = g_counters.size_class[i].load();
    const StorageCacheStats cache = storage_cache_stats();
    s.storage_hits = cache.hits;
    s.storage_misses = cache.misses;
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    s.minflt = ru.ru_minflt;
    s.majflt = ru.ru_majflt;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    s.first_of_epoch = false;
    return s;
  }
};

int usage() {
  std::fprintf(stderr,
               "usage: alloc_bench [--steps N (50)] [--warmup N (10)] [--threads N (auto: all cores)]\n"
               "                   [--parallel auto|batch|ops (auto: batch for D <= 128)] [--batch N (64)]\n"
               "                   [--d-model N (64)] [--precision f32|bf16 (f32)]\n");
  return 2;
}

int run(int argc, char** argv) {
  int64_t steps = 50, warmup = 10, threads = 0, batch = 64, d_model = 64;
  std::string parallel = "auto", precision = "f32";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    if (a == "--parallel") {
      parallel = argv[++i];
      continue;
    }
    if (a == "--precision") {
      precision = argv[++i];
      continue;
    }
    const long long v = std::atoll(argv[++i]);
    if (a == "--steps") steps = v;
    else if (a == "--warmup") warmup = v;
    else if (a == "--threads") threads = v;
    else if (a == "--batch") batch = v;
    else if (a == "--d-model") d_model = v;
    else return usage();
  }
  if (steps < 1 || warmup < 0) return usage();

  train::TrainConfig config;  // the demo's recipe (train_config.h defaults)
  config.threads = threads;
  config.parallel = parallel;  // validated by the Trainer
  config.precision = parse_precision(precision);
  config.batch_size = batch;
  config.model.d_model = d_model;
  config.epochs = 1000;  // never reached: run() stops after warmup + steps

  // A fresh folder under the system's temporary directory (TMPDIR or its default).
  std::string dir_template = (std::filesystem::temp_directory_path() / "attn_alloc_bench_XXXXXX").string();
  const char* dir = mkdtemp(dir_template.data());
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string out_dir = std::string(dir) + "/run";
  std::vector<Snapshot> marks;
  {
    train::Trainer trainer(config, out_dir);
    marks.reserve(static_cast<size_t>(warmup + steps + 1));
    trainer.on_progress([&](const train::TrainProgress& p) {
      if (p.phase != train::TrainProgress::Phase::Train) return;
      marks.push_back(Snapshot::take());
      marks.back().first_of_epoch = p.batch == 1;
    });
    trainer.run(warmup + steps);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (static_cast<int64_t>(marks.size()) < warmup + steps) {
    std::fprintf(stderr, "alloc_bench: only %zu steps ran\n", marks.size());
    return 1;
  }
  // Steady state: the steps after the warm-up, each measured from the end of the step before.
  // A step that opens an epoch is left out: its interval also holds the previous epoch's
  // validation and checkpoint.
  Snapshot sum{};
  int64_t counted = 0;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(warmup, 1)); i < marks.size(); ++i) {
    if (marks[i].first_of_epoch) continue;
    const Snapshot &a = marks[i - 1], &b = marks[i];
    sum.calls += b.calls - a.calls;
    sum.bytes += b.bytes - a.bytes;
    sum.aligned_calls += b.aligned_calls - a.aligned_calls;
    sum.aligned_bytes += b.aligned_bytes - a.aligned_bytes;
    sum.frees += b.frees - a.frees;
    sum.storage_hits += b.storage_hits - a.storage_hits;
    sum.storage_misses += b.storage_misses - a.storage_misses;
    for (int c = 0; c < 4; ++c) sum.cls[c] += b.cls[c] - a.cls[c];
    sum.minflt += b.minflt - a.minflt;
    sum.seconds += b.seconds - a.seconds;
    ++counted;
  }
  if (counted == 0) {
    std::fprintf(stderr, "alloc_bench: no step to measure (raise --steps)\n");
    return 1;
  }
  const double n = static_cast<double>(counted);
  auto per = [&](double v) { return v / n; };
  const double calls = per(static_cast<double>(sum.calls));
  const double bytes = per(static_cast<double>(sum.bytes));
  const double acalls = per(static_cast<double>(sum.aligned_calls));
  const double abytes = per(static_cast<double>(sum.aligned_bytes));
  const double frees = per(static_cast<double>(sum.frees));
  const double hits = per(static_cast<double>(sum.storage_hits));
  const double misses = per(static_cast<double>(sum.storage_misses));
  const double minflt = per(static_cast<double>(sum.minflt));
  const double ms = per(sum.seconds) * 1e3;
  double cls[4];
  for (int i = 0; i < 4; ++i) cls[i] = per(static_cast<double>(sum.cls[i]));

  std::printf("Training step of the demo's model (D=%lld, batch %lld, threads %s, parallel %s, precision %s, ISA %s), "
              "mean of %lld steps after %lld warm-up\n(steps that open an epoch, which include validation, left out):\n",
              static_cast<long long>(d_model), static_cast<long long>(batch),
              threads > 0 ? std::to_string(threads).c_str() : "auto", parallel.c_str(), precision.c_str(),
              kernels::simd::isa_name(kernels::simd::active_isa()), static_cast<long long>(n),
              static_cast<long long>(warmup));
  std::printf("  allocations            %10.0f per step (%.1f MiB)\n", calls, bytes / 1048576.0);
  std::printf("    tensor storage       %10.0f per step (%.1f MiB)\n", acalls, abytes / 1048576.0);
  std::printf("  storage requests       %10.0f per step (%.0f from the storage cache, %.0f fresh)\n", hits + misses,
              hits, misses);
  std::printf("    other (new, malloc)  %10.0f per step (%.1f MiB)\n", calls - acalls, (bytes - abytes) / 1048576.0);
  std::printf("    by size              %.0f < 1 KiB, %.0f < 64 KiB, %.0f < 1 MiB, %.0f >= 1 MiB\n", cls[0], cls[1],
              cls[2], cls[3]);
  std::printf("  frees                  %10.0f per step\n", frees);
  std::printf("  minor page faults      %10.1f per step\n", minflt);
  std::printf("  wall time              %10.2f ms per step\n", ms);
  std::printf(
      "{\"d_model\": %lld, \"batch\": %lld, \"steps\": %lld, \"allocs_per_step\": %.1f, \"bytes_per_step\": %.0f, "
      "\"storage_allocs_per_step\": %.1f, \"storage_bytes_per_step\": %.0f, \"frees_per_step\": %.1f, "
      "\"storage_requests_per_step\": %.1f, \"storage_cache_hits_per_step\": %.1f, "
      "\"minor_faults_per_step\": %.2f, \"ms_per_step\": %.3f}\n",
      static_cast<long long>(d_model), static_cast<long long>(batch), static_cast<long long>(n), calls, bytes,
      acalls, abytes, frees, hits + misses, hits, minflt, ms);
  return 0;
}

}  // namespace
}  // namespace attn::bench

int main(int argc, char** argv) {
  try {
    return attn::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "alloc_bench: %s\n", e.what());
    return 1;
  }
}
