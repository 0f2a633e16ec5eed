// kernels/batch_invariant.cpp — the batch-invariant mode's per-thread flag (batch_invariant.h).
#include "kernels/batch_invariant.h"

namespace attn::kernels {

namespace {
thread_local bool g_batch_invariant = false;
}  // namespace

void set_batch_invariant(bool on) { g_batch_invariant = on; }

bool batch_invariant() { return g_batch_invariant; }

}  // namespace attn::kernels
