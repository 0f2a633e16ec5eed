// attn/autograd/tape.h — the autograd API under its first name.
// The tape is part of core (attn/core/autograd.h: Tensor's backward() and views record on
// it); this header only includes it, so that code written against this path compiles.
// It declares nothing of its own; new code includes attn/core/autograd.h.
#pragma once

#include "attn/core/autograd.h"
