// The default speculative-decoding hooks of IncrementalDecoder (see incremental_decoder.h):
// a decoder that does not override them cannot verify drafts, and says so.
#include "attn/decode/incremental_decoder.h"

#include "attn/core/error.h"

namespace attn::decode {

Tensor IncrementalDecoder::step_many(const Tensor& /*tokens*/) {
  ATTN_CHECK(false, "IncrementalDecoder", "this decoder cannot feed several tokens at once (step_many): "
             "speculative decoding needs a KV-cached decoder (LmDecoder, TransformerDecoder)");
  return Tensor();
}

void IncrementalDecoder::rollback(int64_t /*count*/) {
  ATTN_CHECK(false, "IncrementalDecoder", "this decoder cannot take tokens back (rollback): "
             "speculative decoding needs a KV-cached decoder (LmDecoder, TransformerDecoder)");
}

}  // namespace attn::decode
