// attn/io/safetensors.h — our own reader and writer of the safetensors checkpoint format.
// The reader memory-maps the file and hands out zero-copy tensors; it validates the header
// exactly as the reference Rust reader (huggingface/safetensors, tensor.rs) does. Only
// F32, F64, I64 and BOOL become tensors through get(), and also I8 and BF16 (raw bits,
// core/dtype.h: quantized weights) through get_stored(); other dtypes are parsed and
// validated, not converted.
// No sharded checkpoints (model.safetensors.index.json) and no lazy slicing.
//
// ---- Layout ------------------------------------------------------------------------------
//   bytes [0, 8)          N, the header length, a u64 little-endian
//   bytes [8, 8 + N)      the header, UTF-8 JSON:
//                           {"__metadata__": {"key": "value", ...},            (optional)
//                            "<name>": {"dtype": "F32", "shape": [2, 3],
//                                       "data_offsets": [begin, end]}, ...}
//   bytes [8 + N, EOF)    the byte buffer; each tensor occupies [begin, end) of it, relative
//                         to its start, little-endian, row-major (C order), no padding.
//
// ---- What we write (the reference's `prepare`/`serialize`) ---------------------------------
//   - tensors sorted by dtype alignment descending (the reference enum order: I64 > F64 > F32
//     > BF16 > I8 > BOOL for ours), then by name bytewise, and laid out back to back from offset 0;
//   - compact JSON: "__metadata__" first (omitted when empty, keys sorted), then the tensors in
//     layout order, each as {"dtype":..,"shape":[..],"data_offsets":[b,e]};
//   - the JSON padded with spaces (0x20) to a multiple of 8 bytes, so data starts 8-aligned;
//   - non-contiguous tensors written as their row-major contents; names must be unique, valid
//     UTF-8 and not "__metadata__".
//
// ---- What the reader rejects (REFERENCE.md 3.6, in the reference's order) ---------------------
//   1. a file shorter than 8 bytes;
//   2. N > 100,000,000;
//   3. 8 + N past the end of the file;
//   4. a header that is not UTF-8, not JSON, or of the wrong schema: the top level is not an
//      object; a tensor entry not an object; "dtype" missing, not a string, or not a known
//      dtype string; "shape" not a list of non-negative integers; "data_offsets" not exactly two
//      non-negative integers; "__metadata__" not an object of string values (null is allowed);
//   5. tensors, sorted by (begin, end), that do not start exactly where the previous one ended
//      (the first at 0) or with end < begin: gaps, overlaps and many tensors sharing [0, 16];
//   6. prod(shape), or prod(shape) * bits, overflowing 64 bits (multiplied in order);
//   7. a size in bits that is not a whole number of bytes (F4, F6_* tensors);
//   8. end - begin != prod(shape) * bits / 8;
//   9. 8 + N + (end of the last tensor) != file size: trailing bytes or a truncated buffer.
//   Accepted as the reference accepts: JSON whitespace (space, \t, \n, \r) before and after
//   the object; empty tensors (a 0 in the shape) and rank-0 scalars; unknown fields inside a
//   tensor entry (ignored); NaN/Inf values.
//   Stricter than the reference, deliberately: duplicate keys in any JSON object, nesting
//   deeper than 128 (serde_json's limit, an error there too), and shapes whose non-zero
//   dimensions multiply past INT64_MAX (only possible for empty tensors) are rejected.
//   Every error is an attn::Error "[safetensors] '<path>': ..." naming the tensor where there
//   is one; the reader never reads outside the file.
//
// ---- Reading ------------------------------------------------------------------------------
//   The file is mapped private copy-on-write (MAP_PRIVATE): the file is never modified, and a
//   write into a returned tensor changes only this process's copy instead of crashing. The
//   mapping lives as long as the SafetensorsFile or any tensor viewing it. get() copies only
//   when the data is not aligned for its dtype (a foreign writer's odd header length), or for
//   BOOL bytes other than 0/1, which are normalised to 1. Truncating the file while it is
//   mapped is undefined (SIGBUS), as with any mmap reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attn/core/tensor.h"

namespace attn::io {

// Tensors to write, in any order; names must be unique.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// The "__metadata__" string-to-string map.
using SafetensorsMetadata = std::map<std::string, std::string>;

// One tensor's header entry.
struct SafetensorsTensorInfo {
  std::string dtype;   // the file's dtype string: "F32", "BF16", ...
  Shape shape;         // [] for a scalar
  uint64_t begin = 0;  // data_offsets[0], relative to the start of the byte buffer
  uint64_t end = 0;    // data_offsets[1], one past the last byte
  uint64_t nbytes() const { return end - begin; }
};

// The complete file contents (8-byte length, padded header, data) for these tensors.
std::string serialize_safetensors(const NamedTensors& tensors,
                                  const SafetensorsMetadata& metadata = {});
// Writes serialize_safetensors(tensors, metadata) to `path` atomically (atomic_file.h),
// streaming the tensor data instead of building the file in memory.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata = {});

namespace detail {
struct MappedFile;  // the mmap region; unmapped when the last owner goes
}

// A validated, memory-mapped safetensors file. Copies share the mapping.
class SafetensorsFile {
 public:
  // Maps and validates `path`; throws attn::Error describing the first problem found.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // Tensor names in data-offset order (the order of the byte buffer).
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // The header entry of `name`; throws when there is no such tensor.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  // A contiguous tensor over the mapped bytes (no copy unless misaligned, see above); throws
  // for a missing name or a dtype other than F32, F64, I64, BOOL (a BF16 tensor is refused
  // here, so that no caller mistakes its bits for floats).
  Tensor get(const std::string& name) const;
  // The same for callers that handle reduced-precision weights: also I8 and BF16 tensors
  // (BF16 as its raw uint16 bits), never converted.
  Tensor get_stored(const std::string& name) const;
  // Lets the kernel drop the mapped pages that lie wholly inside `name`'s bytes (madvise
  // MADV_DONTNEED): a later read faults them in from the file again, the same bytes. For a
  // loader that copies each tensor out once, so that loading never holds the whole file's
  // pages beside the copies. Only for tensors nothing has written through a view of the map.
  void release(const std::string& name) const;
  // The "__metadata__" map (empty when absent).
  const SafetensorsMetadata& metadata() const { return metadata_; }
  // N, the header length in bytes; the byte buffer starts at file offset 8 + N.
  uint64_t header_size() const { return header_size_; }
  // The whole mapped file (for diagnostics and tests).
  const void* mapped_data() const;
  size_t mapped_size() const;

 private:
  SafetensorsFile() = default;
  Tensor get_tensor(const std::string& name, bool reduced) const;
  std::string path_;
  std::shared_ptr<detail::MappedFile> mapping_;
  uint64_t header_size_ = 0;
  std::vector<std::pair<std::string, SafetensorsTensorInfo>> tensors_;  // offset order
  std::unordered_map<std::string, size_t> index_;                      // name -> tensors_ slot
  SafetensorsMetadata metadata_;
};

}  // namespace attn::io
