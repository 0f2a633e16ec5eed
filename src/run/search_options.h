// run/search_options.h (private to run/) — a search's options struct with the model folder's
// special ids (BOS, EOS, PAD) and a length limit filled in, the part every search of the run
// layer shares; the caller sets what is particular to the search (beam, temperature, ...).
#pragma once

#include <cstdint>
#include <optional>

#include "attn/run/model_folder.h"

namespace attn::run::detail {

template <class Options>
Options search_options(const ModelFolder& folder, std::optional<int64_t> max_len) {
  Options o;
  o.bos = folder.bos;
  o.eos = folder.eos;
  o.pad = folder.pad;
  o.max_len = max_len;
  return o;
}

}  // namespace attn::run::detail
