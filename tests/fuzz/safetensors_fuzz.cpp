// tests/fuzz/safetensors_fuzz.cpp — the safetensors reader (io/safetensors.h) on arbitrary
// files: open() either refuses the file with attn::Error or gives tensors whose every byte lies
// inside the mapping (each one is read). Accepted files also round-trip: the tensors get()
// returns, written again by serialize_safetensors with the same metadata, read back with the
// same names, dtypes, shapes and bytes.
#include <cstring>
#include <optional>

#include "attn/core/dtype.h"
#include "attn/io/safetensors.h"
#include "fuzz_util.h"

using namespace attn;

namespace {

// Every byte of `t` (a contiguous tensor), summed: ASan sees any read outside the file.
uint64_t touch(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  const size_t n = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i];
  return sum;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const size_t n = static_cast<size_t>(a.numel()) * dtype_size(a.dtype());
  return n == 0 || std::memcmp(a.raw_data(), b.raw_data(), n) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      fuzz::write_scratch("model.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  std::optional<io::SafetensorsFile> opened;
  try {
    opened = io::SafetensorsFile::open(path);
  } catch (const Error&) {
    return 0;  // refused: what a bad file should get
  }
  const io::SafetensorsFile& file = *opened;
  // Every tensor through both accessors; get() refuses the reduced dtypes, get_stored() the rest.
  io::NamedTensors readable;
  uint64_t sum = 0;
  for (const std::string& name : file.names()) {
    const io::SafetensorsTensorInfo& info = file.info(name);
    ATTN_FUZZ_ASSERT(info.end >= info.begin);
    ATTN_FUZZ_ASSERT(8 + file.header_size() + info.end <= file.mapped_size());
    try {
      sum += touch(file.get_stored(name));
    } catch (const Error&) {
    }
    try {
      Tensor t = file.get(name);
      sum += touch(t);
      readable.emplace_back(name, t);
    } catch (const Error&) {
    }
  }
  (void)sum;
  // The round trip of what get() read (names are unique, valid UTF-8 and not __metadata__).
  const std::string again = io::serialize_safetensors(readable, file.metadata());
  const io::SafetensorsFile back = io::SafetensorsFile::open(fuzz::write_scratch("again.safetensors", again));
  ATTN_FUZZ_ASSERT(back.names().size() == readable.size());
  ATTN_FUZZ_ASSERT(back.metadata() == file.metadata());
  for (const auto& [name, t] : readable) ATTN_FUZZ_ASSERT(same_bytes(back.get(name), t));
  return 0;
}
