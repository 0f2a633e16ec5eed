// tests/fuzz/fuzz_util.h — what the fuzz targets share: a private scratch folder per process
// (readers that take a path get the input as a file), the input cut into parts at NUL bytes
// (a target that reads several texts: vocabulary, merges, then the text to encode), and
// the one rule of every target: bad input may throw attn::Error, nothing else may escape.
// An escaping exception (std::bad_alloc, nlohmann::json's, std::out_of_range) aborts the
// process, which libFuzzer reports as a crash with the input that caused it.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "attn/core/error.h"

namespace attn::fuzz {

// A folder of this process's own under the system's temporary folder, removed at exit. The
// name lives on the heap, never freed, so that the exit handler can still read it.
inline const std::string& scratch_dir() {
  static const std::string* dir = [] {
    std::string templ = (std::filesystem::temp_directory_path() / "attn_fuzz_XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) {
      std::perror("attn fuzz: mkdtemp");
      std::abort();
    }
    auto* name = new std::string(templ);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return name;
  }();
  return *dir;
}

// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::perror("attn fuzz: write");
    std::abort();
  }
  return path;
}

// The input cut at its first `count - 1` NUL bytes into `count` parts (missing parts empty).
inline std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t count) {
  std::vector<std::string> parts(count);
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  for (size_t i = 0; i + 1 < count; ++i) {
    const size_t nul = rest.find('\0');
    if (nul == std::string_view::npos) {
      parts[i] = std::string(rest);
      return parts;
    }
    parts[i] = std::string(rest.substr(0, nul));
    rest.remove_prefix(nul + 1);
  }
  parts[count - 1] = std::string(rest);
  return parts;
}

// A property the target checks on accepted input; a violation aborts like a crash.
#define ATTN_FUZZ_ASSERT(cond)                                                               \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "attn fuzz: %s:%d: property violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

}  // namespace attn::fuzz
