// write_file_atomic and read_file: contents, replacement, no stray temporaries, and the
// errors (missing directory, missing file, a failing writer that must leave the old file).
// Every test works in a fresh mkdtemp directory that it removes afterwards.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"

namespace attn::io {
namespace {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/attn_atomic_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    return out;
  }
};

// Runs `f`, which must throw attn::Error, and returns its message.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected attn::Error";
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(AtomicFile, WritesBytesThatReadFileReturns) {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  std::string bytes = "hello";
  bytes.push_back('\0');
  bytes += "\xff world";
  write_file_atomic(path, bytes);
  EXPECT_EQ(read_file(path), bytes);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.bin"});  // no temporary left behind
}

TEST(AtomicFile, ReplacesAnExistingFileAndHandlesEmptyAndLargeContents) {
  TempDir dir;
  const std::string path = dir.file("b.bin");
  write_file_atomic(path, std::string(1 << 20, 'x'));
  EXPECT_EQ(read_file(path).size(), size_t{1} << 20);
  std::string big(3'000'000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  write_file_atomic(path, big);
  EXPECT_EQ(read_file(path), big);
  write_file_atomic(path, std::string());
  EXPECT_EQ(read_file(path), "");
  EXPECT_EQ(dir.entries().size(), 1u);
}

TEST(AtomicFile, CallbackWriterStreamsPiecesAndCountsBytes) {
  TempDir dir;
  const std::string path = dir.file("c.bin");
  uint64_t counted = 0;
  write_file_atomic(path, [&](FileSink& sink) {
    sink.write("abc");
    const int values[2] = {1, 2};
    sink.write(values, sizeof values);
    counted = sink.bytes_written();
  });
  EXPECT_EQ(counted, 3 + 2 * sizeof(int));
  const std::string got = read_file(path);
  ASSERT_EQ(got.size(), counted);
  EXPECT_EQ(got.substr(0, 3), "abc");
}

TEST(AtomicFile, FailingWriterLeavesTheOldFileAndNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("keep.bin");
  write_file_atomic(path, "old contents");
  EXPECT_THROW(write_file_atomic(path,
                                 [](FileSink& sink) {
                                   sink.write("partial new contents");
                                   throw std::runtime_error("writer gave up");
                                 }),
               std::runtime_error);
  EXPECT_EQ(read_file(path), "old contents");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"keep.bin"});
  // An attn::Error from the writer is rethrown unchanged.
  const std::string msg = error_of([&] {
    write_file_atomic(path, [](FileSink&) { fail("my_writer", "bad tensor"); });
  });
  EXPECT_TRUE(contains(msg, "[my_writer] bad tensor")) << msg;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"keep.bin"});
}

TEST(AtomicFile, MissingDirectoryIsAnErrorNamingPathAndErrno) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/x.bin");
  const std::string msg = error_of([&] { write_file_atomic(path, "x"); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "No such file or directory")) << msg;
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, TargetThatIsADirectoryIsAnErrorAndLeavesNoTemporary) {
  TempDir dir;
  fs::create_directory(dir.file("sub"));
  const std::string msg = error_of([&] { write_file_atomic(dir.file("sub"), "x"); });
  EXPECT_TRUE(contains(msg, dir.file("sub"))) << msg;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"sub"});
  EXPECT_THROW(write_file_atomic(dir.path + "/", "x"), Error);
  EXPECT_THROW(write_file_atomic("", "x"), Error);
}

TEST(AtomicFile, ReadFileOfAMissingFileNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("missing.bin");
  const std::string msg = error_of([&] { (void)read_file(path); });
  EXPECT_TRUE(contains(msg, "[read_file]")) << msg;
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "No such file or directory")) << msg;
  EXPECT_THROW((void)read_file(dir.path), Error);  // a directory cannot be read as a file
}

TEST(AtomicFile, NewFileGetsOrdinaryPermissions) {
  TempDir dir;
  const std::string path = dir.file("perm.bin");
  write_file_atomic(path, "x");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const mode_t um = ::umask(0);
  ::umask(um);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~um);
}

}  // namespace
}  // namespace attn::io
