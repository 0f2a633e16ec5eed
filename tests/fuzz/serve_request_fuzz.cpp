// tests/fuzz/serve_request_fuzz.cpp — `attn serve`'s request bodies (serve/api.h,
// parse_completion_request): any bytes either become a checked CompletionRequest or an
// ApiError with an HTTP status of 4xx and a message, never another exception. An accepted
// request holds at least one prompt (a text or non-empty ids) and at most 4 non-empty stops.
#include "attn/serve/api.h"
#include "fuzz_util.h"

using namespace attn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    const serve::CompletionRequest r = serve::parse_completion_request(body);
    ATTN_FUZZ_ASSERT(!r.prompts.empty());
    for (const serve::RawPrompt& p : r.prompts) ATTN_FUZZ_ASSERT(p.text.has_value() || !p.ids.empty());
    ATTN_FUZZ_ASSERT(r.stop.size() <= 4);
    for (const std::string& s : r.stop) ATTN_FUZZ_ASSERT(!s.empty());
  } catch (const serve::ApiError& e) {
    ATTN_FUZZ_ASSERT(e.status >= 400 && e.status < 500);
    ATTN_FUZZ_ASSERT(!std::string(e.what()).empty());
    (void)serve::error_json(e);
  }
  return 0;
}
