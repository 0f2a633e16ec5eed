// tests/support/error_of.h — the message of the attn::Error a call throws, for tests that check
// what an error names. A call that throws nothing gives "(no error)", which contains none of the
// words such tests look for, so their expectation fails; other exception types propagate.
#pragma once

#include <functional>
#include <string>

#include "attn/core/error.h"

namespace attn::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace attn::test
