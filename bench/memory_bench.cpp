// bench/memory_bench.cpp — peak resident memory of one scaled dot-product attention call
// (paper §3.2.1), one case per process so that peaks never mix: float32 q, k, v [B, H, T, Dh]
// (default B=4, H=8, Dh=64), forward under NoGradGuard or forward+backward. It resets the
// kernel's high-water mark (/proc/self/clear_refs) after making the inputs, then reads VmHWM.
// Prints one JSON line. Twin: `torch_bench.py memory`. Not here: timing (attention_bench).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "attn/core/autograd.h"
#include "attn/ops/attention.h"
#include "bench_common.h"

namespace attn::bench {
namespace {

// A "VmRSS:   123 kB"-style field of /proc/self/status, in kB (-1 if absent).
long status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::strtol(line.c_str() + n + 1, nullptr, 10);
  return -1;
}

// Writing "5" to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
bool reset_peak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

struct Case {
  int64_t B = 4, H = 8, T = 4096, Dh = 64;
  bool backward = false, causal = false;
  int threads = 0;
};

int usage() {
  std::fprintf(stderr,
               "usage: memory_bench --T N [--B 4] [--H 8] [--Dh 64] [--backward] [--causal] [--threads N]\n");
  return 2;
}

int run(int argc, char** argv) {
  Case c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> long long { return i + 1 < argc ? std::atoll(argv[++i]) : -1; };
    if (a == "--T") c.T = value();
    else if (a == "--B") c.B = value();
    else if (a == "--H") c.H = value();
    else if (a == "--Dh") c.Dh = value();
    else if (a == "--threads") c.threads = static_cast<int>(value());
    else if (a == "--backward") c.backward = true;
    else if (a == "--causal") c.causal = true;
    else return usage();
  }
  if (c.T < 1 || c.B < 1 || c.H < 1 || c.Dh < 1) return usage();
  set_threads(c.threads);
  const char* mode = c.backward ? "forward_backward" : "forward";
  std::printf("{\"impl\": \"attn\", \"mode\": \"%s\", \"B\": %lld, \"H\": %lld, \"T\": %lld, \"Dh\": %lld, "
              "\"causal\": %s, ",
              mode, static_cast<long long>(c.B), static_cast<long long>(c.H), static_cast<long long>(c.T),
              static_cast<long long>(c.Dh), c.causal ? "true" : "false");
  try {
    const Shape shape{c.B, c.H, c.T, c.Dh};
    Tensor q = random_tensor(shape, 1), k = random_tensor(shape, 2), v = random_tensor(shape, 3);  // [B, H, T, Dh]
    Tensor dout;
    if (c.backward) {
      dout = random_tensor(shape, 4);  // [B, H, T, Dh]
      for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    }
    SdpaOptions options;
    options.causal = c.causal;
    const bool reset = reset_peak();
    const long before = status_kb("VmRSS");
    if (c.backward) {
      const SdpaResult r = scaled_dot_product_attention(q, k, v, options);  // [B, H, T, Dh]
      r.out.backward(dout);
    } else {
      NoGradGuard no_grad;
      const SdpaResult r = scaled_dot_product_attention(q, k, v, options);  // [B, H, T, Dh]
      (void)r;
    }
    const long peak = status_kb("VmHWM");
    std::printf("\"rss_before_kb\": %ld, \"peak_kb\": %ld, \"delta_kb\": %ld, \"peak_reset\": %s}\n", before, peak,
                peak - before, reset ? "true" : "false");
    return 0;
  } catch (const std::bad_alloc&) {
    std::printf("\"error\": \"out of memory\"}\n");
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& ch : msg)
      if (ch == '"' || ch == '\\' || ch == '\n') ch = ' ';
    std::printf("\"error\": \"%s\"}\n", msg.c_str());
  }
  return 3;
}

}  // namespace
}  // namespace attn::bench

int main(int argc, char** argv) { return attn::bench::run(argc, argv); }
