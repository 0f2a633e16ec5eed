// attn/core/rng.h — a small, fast, seedable random generator (xoshiro256**),
// so that dropout, initialisation and data order are reproducible bit for bit
// from one seed on every platform (std:: distributions are not portable).
#pragma once

#include <cstdint>

namespace attn {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { seed_with(seed); }
  void seed_with(uint64_t seed);

  uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n);
  // Standard normal (Box-Muller).
  double normal();

  // The full generator state, for checkpoints.
  struct State { uint64_t s[4]; };
  State state() const { return {{s_[0], s_[1], s_[2], s_[3]}}; }
  void set_state(const State& st) { for (int i = 0; i < 4; ++i) s_[i] = st.s[i]; }

 private:
  uint64_t s_[4];
};

}  // namespace attn
