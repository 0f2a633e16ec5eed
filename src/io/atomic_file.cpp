// Atomic whole-file writes (temporary file + fsync + rename + directory fsync) and reads.
// Plain POSIX calls so that every failure can be reported with its errno text; EINTR is
// retried. Not a general file API: no appends, no locking, no Windows.
#include "attn/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <system_error>

#include "attn/core/error.h"

namespace attn::io {
namespace {

std::atomic<uint64_t> g_temp_counter{0};

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// fsync, retried on EINTR; returns 0 or the errno.
int fsync_fd(int fd) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

// Makes the rename durable. Some file systems cannot fsync a directory (EINVAL); that is not
// an error of ours, the data itself was already synced.
void fsync_directory(const std::string& dir, const std::string& path) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int err = errno;
    fail("write_file_atomic", "'", path, "': cannot open directory '", dir,
         "' to sync it: ", errno_text(err));
  }
  const int err = fsync_fd(dfd);
  ::close(dfd);
  if (err != 0 && err != EINVAL && err != ENOTSUP) {
    fail("write_file_atomic", "'", path, "': fsync of directory '", dir, "' failed: ", errno_text(err));
  }
}

}  // namespace

void FileSink::write(const void* data, size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const size_t chunk = std::min<size_t>(nbytes, size_t{1} << 30);
    const ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      fail("write_file_atomic", "'", path_, "': write failed after ", written_,
           " bytes: ", errno_text(err));
    }
    p += n;
    nbytes -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void write_file_atomic(const std::string& path, const std::function<void(FileSink&)>& fill) {
  ATTN_CHECK(!path.empty(), "write_file_atomic", "empty path");
  const size_t slash = path.find_last_of('/');
  const std::string prefix = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string base = path.substr(prefix.size());
  ATTN_CHECK(!base.empty() && base != "." && base != "..", "write_file_atomic", "'", path,
             "' names a directory, not a file");
  const std::string dir = prefix.empty() ? "." : prefix;
  const std::string temp = prefix + "." + base + ".tmp-" + std::to_string(::getpid()) + "-" +
                           std::to_string(g_temp_counter.fetch_add(1));

  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    fail("write_file_atomic", "'", path, "': cannot create temporary file '", temp,
         "': ", errno_text(err));
  }
  try {
    FileSink sink(fd, path);
    fill(sink);
    const int err = fsync_fd(fd);
    if (err != 0) fail("write_file_atomic", "'", path, "': fsync failed: ", errno_text(err));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    fail("write_file_atomic", "'", path, "': close failed: ", errno_text(err));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    fail("write_file_atomic", "'", path, "': cannot rename the temporary file over it: ",
         errno_text(err));
  }
  fsync_directory(dir, path);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [bytes](FileSink& sink) { sink.write(bytes); });
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    fail("read_file", "cannot open '", path, "': ", errno_text(err));
  }
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail("read_file", "cannot read '", path, "': ", errno_text(err));
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace attn::io
