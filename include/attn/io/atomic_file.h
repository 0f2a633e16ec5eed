// attn/io/atomic_file.h — whole-file writes that are all-or-nothing, and whole-file reads.
// write_file_atomic writes to a temporary file in the target's directory, fsyncs it, renames
// it over the target and fsyncs the directory, so a crash leaves either the old file or the
// new one, never a torn mix (what checkpoints need). POSIX only; no locking between writers
// and no preservation of the old file's permissions or owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace attn::io {

// The byte sink handed to a write_file_atomic callback: it writes to the temporary file.
class FileSink {
 public:
  // Appends `nbytes` bytes; throws attn::Error naming the target path and errno text.
  void write(const void* data, size_t nbytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Bytes appended so far.
  uint64_t bytes_written() const { return written_; }

 private:
  friend void write_file_atomic(const std::string& path,
                                const std::function<void(FileSink&)>& fill);
  FileSink(int fd, const std::string& path) : fd_(fd), path_(path) {}
  int fd_;
  const std::string& path_;
  uint64_t written_ = 0;
};

// Replaces `path` with the bytes `fill` writes into the sink. The temporary file is named
// ".<basename>.tmp-<pid>-<counter>" in the same directory. On any failure (including an
// exception thrown by `fill`, which is rethrown as is) the temporary is removed and `path`
// is left as it was; system-call failures throw attn::Error naming the path and errno text.
void write_file_atomic(const std::string& path, const std::function<void(FileSink&)>& fill);
// Replaces `path` with `bytes`, atomically as above.
void write_file_atomic(const std::string& path, std::string_view bytes);

// The whole contents of `path`; throws attn::Error naming the path and the reason
// ("No such file or directory", ...) when it cannot be opened or read.
std::string read_file(const std::string& path);

}  // namespace attn::io
