// safetensors reader (mmap + the reference reader's validation) and writer (the reference's
// layout: sorted by dtype alignment then name, header padded to 8). See safetensors.h for
// the byte layout and the list of checks. Does not convert dtypes: BF16, F16, ... are
// validated and listed but get() refuses them.
#include "attn/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>
#include <unordered_set>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"

namespace attn::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; attn reads it in place");

namespace detail {
// Owns one mmap region; unmaps it when the last SafetensorsFile or tensor lets go.
struct MappedFile {
  void* addr = nullptr;
  size_t size = 0;
  MappedFile(void* a, size_t s) : addr(a), size(s) {}
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (addr) ::munmap(addr, size);
  }
};
}  // namespace detail

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderSize = 100'000'000;  // the reference's MAX_HEADER_SIZE
constexpr int kMaxJsonDepth = 128;                // serde_json's recursion limit
constexpr const char* kMetadataKey = "__metadata__";

// The reference's dtype enum, in increasing alignment order (the writer sorts by this rank).
struct DtypeSpec {
  const char* name;
  unsigned bits;
};
constexpr DtypeSpec kDtypes[] = {
    {"BOOL", 8},       {"F4", 4},           {"F6_E2M3", 6},      {"F6_E3M2", 6},
    {"U8", 8},         {"I8", 8},           {"F8_E5M2", 8},      {"F8_E4M3", 8},
    {"F8_E8M0", 8},    {"F8_E4M3FNUZ", 8},  {"F8_E5M2FNUZ", 8},  {"I16", 16},
    {"U16", 16},       {"F16", 16},         {"BF16", 16},        {"I32", 32},
    {"U32", 32},       {"F32", 32},         {"C64", 64},         {"F64", 64},
    {"I64", 64},       {"U64", 64},
};

// Index into kDtypes, or -1 for an unknown string.
int dtype_rank(const std::string& name) {
  for (size_t i = 0; i < std::size(kDtypes); ++i) {
    if (name == kDtypes[i].name) return static_cast<int>(i);
  }
  return -1;
}

const char* file_dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::Bool: return "BOOL";
    case DType::I8: return "I8";
    case DType::BF16: return "BF16";
  }
  return "?";
}

// Our DType for a file dtype string, when we have one.
bool attn_dtype(const std::string& name, DType& out) {
  if (name == "F32") out = DType::F32;
  else if (name == "F64") out = DType::F64;
  else if (name == "I64") out = DType::I64;
  else if (name == "BOOL") out = DType::Bool;
  else return false;
  return true;
}

// The same, also for the reduced-precision weight dtypes (SafetensorsFile::get_stored).
bool attn_stored_dtype(const std::string& name, DType& out) {
  if (attn_dtype(name, out)) return true;
  if (name == "I8") out = DType::I8;
  else if (name == "BF16") out = DType::BF16;
  else return false;
  return true;
}

template <class... Args>
[[noreturn]] void bad_file(const std::string& path, Args&&... args) {
  fail("safetensors", "'", path, "': ", std::forward<Args>(args)...);
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string u64_shape_str(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Offset of the first byte that breaks strict UTF-8 (no overlongs, no surrogates, at most
// U+10FFFF, as Rust's str::from_utf8), or npos when the whole range is valid.
size_t first_invalid_utf8(const unsigned char* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return i;
    if (n - i < len) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::string::npos;
}

// A JSON non-negative integer as u64 (serde's usize on a 64-bit target); floats, negatives
// and non-numbers are refused.
bool json_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// Parses the header text, refusing duplicate keys and deep nesting on the way.
json parse_header_json(const char* first, const char* last, const std::string& path) {
  struct Refusal {
    std::string why;
  };
  std::vector<std::unordered_set<std::string>> open_objects;  // keys seen per open object
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) {
          throw Refusal{str_cat("JSON nested deeper than ", kMaxJsonDepth, " levels")};
        }
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() &&
            !open_objects.back().insert(parsed.get_ref<const std::string&>()).second) {
          throw Refusal{str_cat("duplicate key \"", parsed.get_ref<const std::string&>(), "\"")};
        }
        break;
      default: break;
    }
    return true;
  };
  try {
    return json::parse(first, last, callback);
  } catch (const Refusal& r) {
    bad_file(path, "header is not valid: ", r.why);
  } catch (const json::exception& e) {
    bad_file(path, "header is not valid JSON: ", e.what());
  }
}

struct ParsedTensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;
};

// Item 4's schema check of one tensor entry.
ParsedTensor parse_tensor_entry(const std::string& name, const json& entry, const std::string& path) {
  if (!entry.is_object()) {
    bad_file(path, "tensor '", name, "': entry must be an object with dtype, shape and ",
             "data_offsets, got ", entry.type_name());
  }
  ParsedTensor t;
  t.name = name;
  const auto dt = entry.find("dtype");
  if (dt == entry.end()) bad_file(path, "tensor '", name, "': missing \"dtype\"");
  if (!dt->is_string()) {
    bad_file(path, "tensor '", name, "': \"dtype\" must be a string, got ", dt->dump());
  }
  t.dtype = dt->get<std::string>();
  if (dtype_rank(t.dtype) < 0) bad_file(path, "tensor '", name, "': unknown dtype \"", t.dtype, "\"");

  const auto sh = entry.find("shape");
  if (sh == entry.end()) bad_file(path, "tensor '", name, "': missing \"shape\"");
  if (!sh->is_array()) {
    bad_file(path, "tensor '", name, "': \"shape\" must be a list of non-negative integers, got ",
             sh->dump());
  }
  for (const json& d : *sh) {
    uint64_t v = 0;
    if (!json_u64(d, v)) {
      bad_file(path, "tensor '", name,
               "': \"shape\" must be a list of non-negative integers, got ", sh->dump());
    }
    t.shape.push_back(v);
  }

  const auto off = entry.find("data_offsets");
  if (off == entry.end()) bad_file(path, "tensor '", name, "': missing \"data_offsets\"");
  if (!off->is_array() || off->size() != 2 || !json_u64((*off)[0], t.begin) ||
      !json_u64((*off)[1], t.end)) {
    bad_file(path, "tensor '", name,
             "': \"data_offsets\" must be two non-negative integers, got ", off->dump());
  }
  return t;
}

struct ParsedHeader {
  uint64_t header_size = 0;
  std::vector<ParsedTensor> tensors;  // sorted by data offsets
  SafetensorsMetadata metadata;
};

// Items 1-9 of safetensors.h over the whole file image `data[0, size)`.
ParsedHeader parse_and_validate(const unsigned char* data, size_t size, const std::string& path) {
  // 1-3: the length prefix.
  if (size < 8) {
    bad_file(path, "file is ", size, " bytes, shorter than the 8-byte header length (header too small)");
  }
  uint64_t n = 0;
  std::memcpy(&n, data, 8);  // little-endian host (static_assert above)
  if (n > kMaxHeaderSize) {
    bad_file(path, "header length ", n, " exceeds the limit of ", kMaxHeaderSize,
             " bytes (header too large)");
  }
  if (n > size - 8) {
    bad_file(path, "header length ", n, " runs past the end of the file (", size,
             " bytes; invalid header length)");
  }
  ParsedHeader out;
  out.header_size = n;

  // 4: UTF-8, JSON, schema.
  const char* text = reinterpret_cast<const char*>(data + 8);
  const size_t bad_byte = first_invalid_utf8(data + 8, n);
  if (bad_byte != std::string::npos) {
    bad_file(path, "header is not valid UTF-8 (byte ", bad_byte, " of the header)");
  }
  const json root = parse_header_json(text, text + n, path);
  if (!root.is_object()) {
    bad_file(path, "header must be a JSON object, got ", root.type_name());
  }
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey) {
      if (value.is_null()) continue;
      if (!value.is_object()) {
        bad_file(path, "\"__metadata__\" must map strings to strings, got ", value.type_name());
      }
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          bad_file(path, "\"__metadata__\" value of key \"", mk, "\" must be a string, got ",
                   mv.dump());
        }
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_tensor_entry(key, value, path));
  }

  // 5-8, per tensor in offset order. Ties are broken by name so the error is deterministic.
  std::sort(out.tensors.begin(), out.tensors.end(), [](const ParsedTensor& a, const ParsedTensor& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  uint64_t start = 0;
  for (const ParsedTensor& t : out.tensors) {
    if (t.begin != start || t.end < t.begin) {
      bad_file(path, "tensor '", t.name, "': invalid data_offsets [", t.begin, ", ", t.end,
               "]: expected it to begin at byte ", start,
               " (tensors must tile the buffer from 0, without gaps or overlaps)");
    }
    start = t.end;
    uint64_t numel = 1;
    for (uint64_t d : t.shape) {
      if (!checked_mul(numel, d, numel)) {
        bad_file(path, "tensor '", t.name, "': shape ", u64_shape_str(t.shape),
                 " overflows 64 bits (number of elements)");
      }
    }
    const unsigned bits = kDtypes[dtype_rank(t.dtype)].bits;
    uint64_t nbits = 0;
    if (!checked_mul(numel, bits, nbits)) {
      bad_file(path, "tensor '", t.name, "': shape ", u64_shape_str(t.shape), " of ", t.dtype,
               " overflows 64 bits (size in bits)");
    }
    if (nbits % 8 != 0) {
      bad_file(path, "tensor '", t.name, "': ", numel, " elements of ", t.dtype, " are ", nbits,
               " bits, not a whole number of bytes (misaligned slice)");
    }
    if (t.end - t.begin != nbits / 8) {
      bad_file(path, "tensor '", t.name, "': data_offsets [", t.begin, ", ", t.end, "] hold ",
               t.end - t.begin, " bytes, but dtype ", t.dtype, " and shape ",
               u64_shape_str(t.shape), " need ", nbits / 8, " bytes");
    }
    // Ours, beyond the reference: attn shapes and strides are int64.
    uint64_t nonzero = 1;
    for (uint64_t d : t.shape) {
      if (d != 0 && (!checked_mul(nonzero, d, nonzero) ||
                     nonzero > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
        bad_file(path, "tensor '", t.name, "': shape ", u64_shape_str(t.shape),
                 " is too large to index with int64");
      }
    }
  }

  // 9: the tensors must end exactly at the end of the file.
  const uint64_t data_bytes = size - 8 - n;
  if (start != data_bytes) {
    bad_file(path, "the tensors end at byte ", start, " of the byte buffer, but the file holds ",
             data_bytes, " data bytes (",
             start < data_bytes ? "trailing bytes after the last tensor" : "file truncated",
             "; incomplete metadata buffer)");
  }
  return out;
}

// ---- writer ------------------------------------------------------------------------------

// A JSON string literal, escaped as serde_json does; invalid UTF-8 is an error.
std::string json_quote(const std::string& s, const char* what, const char* op) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    fail(op, what, " is not valid UTF-8: \"", s, "\"");
  }
}

struct Prepared {
  std::string header;  // padded JSON
  std::vector<std::pair<std::string, Tensor>> tensors;  // layout order, contiguous
};

Prepared prepare(const NamedTensors& tensors, const SafetensorsMetadata& metadata, const char* op) {
  Prepared p;
  std::unordered_set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    ATTN_CHECK(name != kMetadataKey, op, "\"__metadata__\" is reserved and cannot name a tensor");
    ATTN_CHECK(seen.insert(name).second, op, "duplicate tensor name '", name, "'");
    ATTN_CHECK(t.defined(), op, "tensor '", name, "' is undefined");
    p.tensors.emplace_back(name, t.is_contiguous() ? t : t.clone());
  }
  // Alignment descending (the reference enum rank), then name.
  std::sort(p.tensors.begin(), p.tensors.end(), [](const auto& a, const auto& b) {
    const int ra = dtype_rank(file_dtype_name(a.second.dtype()));
    const int rb = dtype_rank(file_dtype_name(b.second.dtype()));
    if (ra != rb) return ra > rb;
    return a.first < b.first;
  });

  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) h += ",";
      first = false;
      h += json_quote(k, "metadata key", op) + ":" + json_quote(v, "metadata value", op);
    }
    h += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : p.tensors) {
    if (h.size() > 1) h += ",";
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    h += json_quote(name, "tensor name", op);
    h += ":{\"dtype\":\"";
    h += file_dtype_name(t.dtype());
    h += "\",\"shape\":[";
    for (int64_t i = 0; i < t.dim(); ++i) {
      if (i) h += ",";
      h += std::to_string(t.shape()[static_cast<size_t>(i)]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + nbytes) + "]}";
    offset += nbytes;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  ATTN_CHECK(h.size() <= kMaxHeaderSize, op, "header of ", h.size(), " bytes exceeds the limit of ",
             kMaxHeaderSize);
  p.header = std::move(h);
  return p;
}

template <class Sink>
void emit(const Prepared& p, Sink&& sink) {
  const uint64_t n = p.header.size();
  sink(&n, 8);
  sink(p.header.data(), p.header.size());
  for (const auto& [name, t] : p.tensors) {
    const size_t nbytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    if (nbytes) sink(t.raw_data(), nbytes);
  }
}

}  // namespace

std::string serialize_safetensors(const NamedTensors& tensors, const SafetensorsMetadata& metadata) {
  const Prepared p = prepare(tensors, metadata, "serialize_safetensors");
  std::string out;
  emit(p, [&](const void* d, size_t n) { out.append(static_cast<const char*>(d), n); });
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata) {
  const Prepared p = prepare(tensors, metadata, "save_safetensors");
  write_file_atomic(path, [&](FileSink& sink) {
    emit(p, [&](const void* d, size_t n) { sink.write(d, n); });
  });
}

// ---- reader ------------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    bad_file(path, "cannot open: ", errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    bad_file(path, "cannot stat: ", errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    bad_file(path, "not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    parse_and_validate(nullptr, size, path);  // throws "header too small"
  }
  // Private and writable: the file is never written, and writes into a tensor stay local.
  // MAP_NORESERVE: no swap is reserved for pages nobody writes, so a file larger than the
  // machine's memory still maps (its header can be read; its tensors fault in as they are read).
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (addr == MAP_FAILED) bad_file(path, "cannot mmap ", size, " bytes: ", errno_text(map_err));
  auto mapping = std::make_shared<detail::MappedFile>(addr, size);

  ParsedHeader header = parse_and_validate(static_cast<const unsigned char*>(addr), size, path);
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = std::move(mapping);
  f.header_size_ = header.header_size;
  f.metadata_ = std::move(header.metadata);
  f.tensors_.reserve(header.tensors.size());
  for (ParsedTensor& t : header.tensors) {
    SafetensorsTensorInfo info;
    info.dtype = std::move(t.dtype);
    info.shape.assign(t.shape.begin(), t.shape.end());  // fits: checked in parse_and_validate
    info.begin = t.begin;
    info.end = t.end;
    f.index_.emplace(t.name, f.tensors_.size());
    f.tensors_.emplace_back(std::move(t.name), std::move(info));
  }
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    bad_file(path_, "no tensor named '", name, "' (the file holds ", tensors_.size(), " tensors)");
  }
  return tensors_[it->second].second;
}

Tensor SafetensorsFile::get(const std::string& name) const { return get_tensor(name, false); }

Tensor SafetensorsFile::get_stored(const std::string& name) const { return get_tensor(name, true); }

Tensor SafetensorsFile::get_tensor(const std::string& name, bool reduced) const {
  const SafetensorsTensorInfo& info = this->info(name);
  DType dtype{};
  if (!(reduced ? attn_stored_dtype(info.dtype, dtype) : attn_dtype(info.dtype, dtype))) {
    bad_file(path_, "unsupported dtype ", info.dtype, " for tensor '", name,
             reduced ? "' (attn reads F32, F64, I64, BOOL, I8 and BF16)" : "' (attn reads F32, F64, I64 and BOOL)");
  }
  unsigned char* bytes = static_cast<unsigned char*>(mapping_->addr) + 8 + header_size_ + info.begin;
  const size_t nbytes = static_cast<size_t>(info.nbytes());
  bool copy = reinterpret_cast<uintptr_t>(bytes) % dtype_size(dtype) != 0;
  bool normalise_bools = false;
  if (dtype == DType::Bool) {
    normalise_bools = std::any_of(bytes, bytes + nbytes, [](unsigned char b) { return b > 1; });
    copy = copy || normalise_bools;
  }
  if (!copy) {
    return Tensor::from_storage(Storage::wrap(bytes, nbytes, mapping_), 0, info.shape, dtype);
  }
  std::shared_ptr<Storage> storage = Storage::allocate(nbytes);
  auto* dst = static_cast<unsigned char*>(storage->data());
  if (nbytes) std::memcpy(dst, bytes, nbytes);
  if (normalise_bools) {
    for (size_t i = 0; i < nbytes; ++i) dst[i] = dst[i] != 0;
  }
  return Tensor::from_storage(std::move(storage), 0, info.shape, dtype);
}

void SafetensorsFile::release(const std::string& name) const {
  const SafetensorsTensorInfo& info = this->info(name);
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(mapping_->addr) + 8 + header_size_;
  const uintptr_t first = (base + info.begin + page - 1) / page * page, last = (base + info.end) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

const void* SafetensorsFile::mapped_data() const { return mapping_ ? mapping_->addr : nullptr; }
size_t SafetensorsFile::mapped_size() const { return mapping_ ? mapping_->size : 0; }

}  // namespace attn::io
