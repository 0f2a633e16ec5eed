// safetensors reader and writer: round trips, the exact bytes we write, zero-copy mapping
// and its lifetime, and one test per malformed-file rule of REFERENCE.md 3.6 (the bad bytes
// are built by hand here). Every test works in a fresh mkdtemp directory it removes after.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/core/tensor.h"
#include "attn/io/atomic_file.h"
#include "attn/io/safetensors.h"

namespace attn::io {
namespace {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/attn_safetensors_XXXXXX";
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
};

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

template <class T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// length prefix + header + data, without any padding.
std::string file_bytes(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

std::string write_raw(const TempDir& dir, const std::string& bytes, const std::string& name = "t.safetensors") {
  const std::string path = dir.file(name);
  write_file_atomic(path, bytes);
  return path;
}

// The attn::Error message of SafetensorsFile::open(path); fails the test when it opens.
std::string open_error(const std::string& path) {
  try {
    (void)SafetensorsFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected SafetensorsFile::open to throw attn::Error for " << path;
  return "";
}

// Writes `bytes`, opens them, and returns the error message.
std::string error_for(const std::string& bytes) {
  TempDir dir;
  const std::string path = write_raw(dir, bytes);
  std::string msg = open_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
  EXPECT_NE(msg.find("[safetensors]"), std::string::npos) << msg;
  return msg;
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

// ---- writer and round trips ----------------------------------------------------------------

TEST(Safetensors, RoundTripsSeveralDtypesShapesAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("rt.safetensors");
  const Tensor f32 = Tensor::from_vector<float>({1.5f, -2, 3, 4e-8f, 5, 6e20f}, {2, 3});
  const Tensor f64 = Tensor::from_vector<double>({0.1, -0.2, 1e-300, 7}, {4});
  const Tensor i64 = Tensor::from_vector<int64_t>({-1, 0, INT64_MAX, INT64_MIN}, {2, 2});
  const Tensor b = Tensor::from_bools({1, 0, 1, 1, 0}, {5});
  const Tensor scalar = Tensor::scalar(3.25, DType::F64);
  const Tensor empty = Tensor::zeros({0, 3});
  const Tensor base = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor transposed = base.transpose(0, 1);  // [3, 2], not contiguous
  ASSERT_FALSE(transposed.is_contiguous());
  const SafetensorsMetadata meta{{"format", "pt"}, {"note", "un\xc3\xaf" "code \"quoted\"\n"}};
  save_safetensors(path,
                   {{"w.f32", f32}, {"w.f64", f64}, {"ids", i64}, {"mask", b}, {"s", scalar},
                    {"empty", empty}, {"t", transposed}},
                   meta);

  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_EQ(f.names().size(), 7u);
  EXPECT_EQ(f.get("w.f32").to_vector<float>(), f32.to_vector<float>());
  EXPECT_EQ(f.get("w.f32").shape(), (Shape{2, 3}));
  EXPECT_EQ(f.get("w.f64").to_vector<double>(), f64.to_vector<double>());
  EXPECT_EQ(f.get("ids").to_vector<int64_t>(), i64.to_vector<int64_t>());
  EXPECT_EQ(f.get("ids").dtype(), DType::I64);
  EXPECT_EQ(f.get("mask").dtype(), DType::Bool);
  EXPECT_EQ(f.get("mask").to_vector<double>(), (std::vector<double>{1, 0, 1, 1, 0}));
  EXPECT_EQ(f.get("s").dim(), 0);
  EXPECT_EQ(f.get("s").item(), 3.25);
  EXPECT_EQ(f.info("s").nbytes(), 8u);
  EXPECT_EQ(f.get("empty").shape(), (Shape{0, 3}));
  EXPECT_EQ(f.info("empty").nbytes(), 0u);
  EXPECT_EQ(f.get("t").shape(), (Shape{3, 2}));
  EXPECT_EQ(f.get("t").to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(f.info("t").dtype, "F32");
  EXPECT_EQ(f.info("mask").dtype, "BOOL");
  EXPECT_TRUE(f.has("mask"));
  EXPECT_FALSE(f.has("nope"));
  // serialize_safetensors produces the very same file.
  EXPECT_EQ(serialize_safetensors({{"w.f32", f32}, {"w.f64", f64}, {"ids", i64}, {"mask", b},
                                   {"s", scalar}, {"empty", empty}, {"t", transposed}},
                                  meta),
            read_file(path));
}

TEST(Safetensors, HeaderIsPaddedToEightAndDataSortedByAlignmentThenName) {
  TempDir dir;
  const std::string path = dir.file("order.safetensors");
  save_safetensors(path, {{"b", Tensor::zeros({3})},
                          {"z", Tensor::from_bools({1, 0}, {2})},
                          {"a", Tensor::zeros({1})},
                          {"c", Tensor::zeros({2}, DType::F64)},
                          {"y", Tensor::zeros({1}, DType::I64)},
                          {"d", Tensor::zeros({2}, DType::I64)}});
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  const size_t close = header.find_last_of('}');
  EXPECT_EQ(header.substr(close + 1), std::string(n - close - 1, ' '));  // only spaces after '}'
  EXPECT_LT(n - close - 1, 8u);
  // I64 > F64 > F32 > BOOL in the reference's enum order, then by name.
  const std::vector<std::string> expected{"d", "y", "c", "a", "b", "z"};
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names(), expected);
  uint64_t offset = 0;
  for (const std::string& name : expected) {
    EXPECT_EQ(f.info(name).begin, offset) << name;
    offset = f.info(name).end;
  }
  EXPECT_EQ(8 + n + offset, bytes.size());
  // The JSON text lists the tensors in that same order (positions of the quoted names).
  size_t last = 0;
  for (const std::string& name : expected) {
    const size_t at = header.find("\"" + name + "\":{");
    ASSERT_NE(at, std::string::npos) << name;
    EXPECT_GT(at, last) << name;
    last = at;
  }
}

TEST(Safetensors, TinyFileMatchesTheBytesTheFormatPrescribes) {
  // {"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} is 54 bytes: 5 + 15 + 12 + 21 + 1;
  // padded with 2 spaces to N = 56 = 0x38.
  const std::string expected =
      std::string("\x38\0\0\0\0\0\0\0", 8) +
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  " +
      std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);  // 1.0f, -2.0f little-endian
  EXPECT_EQ(serialize_safetensors({{"a", Tensor::from_vector<float>({1, -2}, {2})}}), expected);

  // Metadata first, then I64 before BOOL: the JSON is 133 bytes, padded with 3 spaces to 136.
  const std::string expected2 =
      std::string("\x88\0\0\0\0\0\0\0", 8) +
      "{\"__metadata__\":{\"k\":\"v\"},\"i\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
      "\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[8,11]}}   " +
      std::string("\x05\0\0\0\0\0\0\0", 8) + std::string("\x01\x00\x01", 3);
  EXPECT_EQ(serialize_safetensors({{"m", Tensor::from_bools({1, 0, 1}, {3})},
                                   {"i", Tensor::scalar(5, DType::I64)}},
                                  {{"k", "v"}}),
            expected2);

  // No tensors and no metadata: "{}" and six spaces.
  EXPECT_EQ(serialize_safetensors({}), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));

  // And the reader takes the hand-built bytes back.
  TempDir dir;
  const SafetensorsFile f = SafetensorsFile::open(write_raw(dir, expected2));
  EXPECT_EQ(f.get("i").item(), 5);
  EXPECT_EQ(f.get("m").to_vector<double>(), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(f.metadata().at("k"), "v");
  EXPECT_EQ(f.header_size(), 136u);
}

TEST(Safetensors, WriterRejectsDuplicateReservedUndefinedAndNonUtf8Names) {
  const Tensor t = Tensor::zeros({2});
  try {
    (void)serialize_safetensors({{"x", t}, {"y", t}, {"x", t}});
    FAIL() << "duplicate names must throw";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "duplicate tensor name 'x'");
  }
  TempDir dir;
  EXPECT_THROW(save_safetensors(dir.file("d.safetensors"), {{"x", t}, {"x", t}}), Error);
  EXPECT_TRUE(fs::is_empty(dir.path));  // nothing written, not even a temporary
  EXPECT_THROW((void)serialize_safetensors({{"__metadata__", t}}), Error);
  EXPECT_THROW((void)serialize_safetensors({{"u", Tensor()}}), Error);
  EXPECT_THROW((void)serialize_safetensors({{"bad\xff", t}}), Error);
  EXPECT_THROW((void)serialize_safetensors({{"x", t}}, {{"k", "\xc0\xaf"}}), Error);
}

// ---- zero copy and lifetime -----------------------------------------------------------------

TEST(Safetensors, GetIsAZeroCopyViewIntoTheMapping) {
  TempDir dir;
  const std::string path = dir.file("zc.safetensors");
  save_safetensors(path, {{"w", Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})},
                          {"v", Tensor::from_vector<double>({5, 6}, {2})}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  const auto* base = static_cast<const unsigned char*>(f.mapped_data());
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(f.mapped_size(), fs::file_size(path));
  for (const std::string name : {"w", "v"}) {
    const Tensor t = f.get(name);
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    EXPECT_EQ(p, base + 8 + f.header_size() + f.info(name).begin) << name;
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % dtype_size(t.dtype()), 0u);
  }
  // Two gets of one tensor see the same bytes.
  EXPECT_EQ(f.get("w").raw_data(), f.get("w").raw_data());
}

// The kB of `path`'s mapping resident in this process (/proc/self/smaps "Rss:"), -1 if unmapped.
long mapped_rss_kb(const std::string& path) {
  const std::string smaps = read_file("/proc/self/smaps");
  const size_t at = smaps.find(path);
  if (at == std::string::npos) return -1;
  const size_t rss = smaps.find("\nRss:", at);
  return rss == std::string::npos ? -1 : std::strtol(smaps.c_str() + rss + 5, nullptr, 10);
}

// release(name) takes the pages of a tensor that was read out of this process's memory (what
// the checkpoint loader does after copying each tensor), and the bytes read afterwards are the
// same. Control: before the release the pages are resident.
TEST(Safetensors, ReleaseDropsATensorsMappedPagesAndTheBytesReadAfterAreTheSame) {
  TempDir dir;
  const std::string path = dir.file("release.safetensors");
  std::vector<float> big(1 << 20);  // 4 MiB
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 9973) * 0.5f;
  save_safetensors(path, {{"big", Tensor::from_vector<float>(big, {1024, 1024})},
                          {"small", Tensor::from_vector<float>({1, 2, 3}, {3})}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.get("big").to_vector<float>(), big);  // every page read
  const long before = mapped_rss_kb(path);
  EXPECT_GE(before, 4000) << "control: the read pages are resident";
  f.release("big");
  f.release("small");  // smaller than a page: nothing to drop, no error
  EXPECT_LT(mapped_rss_kb(path), 64) << "the released pages left the process";
  EXPECT_EQ(f.get("big").to_vector<float>(), big) << "read again from the file";
  EXPECT_EQ(f.get("small").to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_THROW(f.release("missing"), Error);
}

bool mapped_in_process(const std::string& path) {
  return read_file("/proc/self/maps").find(path) != std::string::npos;
}

TEST(Safetensors, MappingOutlivesTheFileObjectAndGoesWithTheLastTensor) {
  TempDir dir;
  const std::string path = dir.file("life.safetensors");
  save_safetensors(path, {{"w", Tensor::from_vector<float>({7, 8, 9}, {3})}});
  Tensor t;
  {
    const SafetensorsFile f = SafetensorsFile::open(path);
    t = f.get("w");
    EXPECT_TRUE(mapped_in_process(path));
  }
  EXPECT_TRUE(mapped_in_process(path));  // the tensor keeps the mapping alive
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{7, 8, 9}));
  t = Tensor();
  EXPECT_FALSE(mapped_in_process(path));  // and it goes with the last view
}

TEST(Safetensors, WritingIntoALoadedTensorNeverChangesTheFile) {
  TempDir dir;
  const std::string path = dir.file("cow.safetensors");
  save_safetensors(path, {{"w", Tensor::from_vector<float>({1, 2}, {2})}});
  const std::string before = read_file(path);
  const SafetensorsFile f = SafetensorsFile::open(path);
  Tensor t = f.get("w");
  t.fill(42);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{42, 42}));
  EXPECT_EQ(read_file(path), before);
}

TEST(Safetensors, MisalignedDataIsCopiedToAlignedMemory) {
  // 54-byte header, unpadded: the F32 data starts at file offset 62, not a multiple of 4.
  const std::string header = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  ASSERT_EQ(header.size(), 54u);
  TempDir dir;
  const SafetensorsFile f = SafetensorsFile::open(write_raw(dir, file_bytes(header, bytes_of<float>({1.5f, -3}))));
  const Tensor t = f.get("x");
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, -3}));
  const auto p = reinterpret_cast<uintptr_t>(t.raw_data());
  EXPECT_EQ(p % 4, 0u);
  const auto base = reinterpret_cast<uintptr_t>(f.mapped_data());
  EXPECT_FALSE(p >= base && p < base + f.mapped_size());  // a copy, not the mapping
}

TEST(Safetensors, BoolBytesOtherThanZeroOrOneReadAsTrue) {
  const std::string header = "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[4],\"data_offsets\":[0,4]}}";
  TempDir dir;
  const SafetensorsFile f = SafetensorsFile::open(write_raw(dir, file_bytes(header, std::string("\x00\x01\x02\xff", 4))));
  const Tensor m = f.get("m");
  EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{0, 1, 1, 1}));
  const bool* p = m.data<bool>();
  EXPECT_EQ(std::memcmp(p, "\x00\x01\x01\x01", 4), 0);
}

TEST(Safetensors, AcceptsWhitespaceAroundTheHeaderObject) {
  // The reference reader accepts JSON whitespace before '{' and \r \t \n and space after '}'.
  const std::string json = "{\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}";
  TempDir dir;
  const std::string bytes = file_bytes("\n \t\r" + json + "\r\n\t   ", bytes_of<int64_t>({-9}));
  const SafetensorsFile f = SafetensorsFile::open(write_raw(dir, bytes));
  EXPECT_EQ(f.get("x").to_vector<int64_t>(), (std::vector<int64_t>{-9}));
}

TEST(Safetensors, AcceptsUnknownFieldsAndNullMetadataLikeTheReference) {
  const std::string json =
      "{\"__metadata__\":null,\"x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4],"
      "\"extra\":[1,2]}}";
  TempDir dir;
  const SafetensorsFile f = SafetensorsFile::open(write_raw(dir, file_bytes(json, bytes_of<float>({2}))));
  EXPECT_EQ(f.get("x").item(), 2);
  EXPECT_TRUE(f.metadata().empty());
}

TEST(Safetensors, ParsesOtherKnownDtypesButGetNamesTheUnsupportedDtype) {
  const std::string json =
      "{\"x\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
      "\"y\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]},"
      "\"q\":{\"dtype\":\"F4\",\"shape\":[2,2],\"data_offsets\":[7,9]}}";
  TempDir dir;
  const SafetensorsFile f = SafetensorsFile::open(write_raw(dir, file_bytes(json, std::string(9, '\x3f'))));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"x", "y", "q"}));
  EXPECT_EQ(f.info("x").dtype, "BF16");
  EXPECT_EQ(f.info("x").shape, (Shape{2}));
  EXPECT_EQ(f.info("q").nbytes(), 2u);  // 4 elements of 4 bits
  try {
    (void)f.get("x");
    FAIL() << "BF16 must not convert silently";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "unsupported dtype BF16 for tensor 'x'");
    EXPECT_HAS(std::string(e.what()), f.path());
  }
  EXPECT_THROW((void)f.get("y"), Error);
  EXPECT_THROW((void)f.get("q"), Error);
}

TEST(Safetensors, MissingTensorOrFileIsAnErrorNamingIt) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  save_safetensors(path, {{"a", Tensor::zeros({1})}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  try {
    (void)f.get("b");
    FAIL() << "missing tensor must throw";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "no tensor named 'b'");
    EXPECT_HAS(std::string(e.what()), path);
  }
  EXPECT_THROW((void)f.info("b"), Error);
  const std::string msg = open_error(dir.file("absent.safetensors"));
  EXPECT_HAS(msg, "absent.safetensors");
  EXPECT_HAS(msg, "No such file or directory");
  EXPECT_HAS(open_error(dir.path), "not a regular file");
}

// ---- malformed files: one test per rule ------------------------------------------------------

TEST(Safetensors, RejectsFileShorterThanEightBytes) {
  EXPECT_HAS(error_for(std::string("\x01\x00\x00\x00\x00", 5)), "shorter than the 8-byte header length");
  EXPECT_HAS(error_for(""), "file is 0 bytes");
}

TEST(Safetensors, RejectsHeaderLengthAboveTheLimit) {
  EXPECT_HAS(error_for(le64(100'000'001) + std::string(64, ' ')), "exceeds the limit of 100000000");
  EXPECT_HAS(error_for(le64(UINT64_MAX) + "{}"), "header too large");
}

TEST(Safetensors, RejectsHeaderLengthRunningPastTheEndOfTheFile) {
  const std::string msg = error_for(le64(100) + "{\"a\":1}");
  EXPECT_HAS(msg, "header length 100 runs past the end of the file");
  // The limit itself is fine as a length, but the file is too short for it.
  EXPECT_HAS(error_for(le64(100'000'000) + "{}"), "runs past the end");
}

TEST(Safetensors, RejectsHeaderThatIsNotUtf8) {
  EXPECT_HAS(error_for(file_bytes("{\"a\xff\":1}")), "not valid UTF-8");
  EXPECT_HAS(error_for(file_bytes("{\"\xc0\xaf\":1}")), "not valid UTF-8");      // overlong '/'
  EXPECT_HAS(error_for(file_bytes("{\"\xed\xa0\x80\":1}")), "not valid UTF-8");  // a surrogate
  EXPECT_HAS(error_for(file_bytes("{\"\xe2\x82")), "not valid UTF-8");           // cut short
}

TEST(Safetensors, RejectsHeaderThatIsNotJson) {
  EXPECT_HAS(error_for(file_bytes("{not json}")), "not valid JSON");
  EXPECT_HAS(error_for(file_bytes("{} trailing")), "not valid JSON");
  EXPECT_HAS(error_for(file_bytes("")), "not valid JSON");
  EXPECT_HAS(error_for(file_bytes("{\"a\":1,}")), "not valid JSON");
}

TEST(Safetensors, RejectsHeaderWithTheWrongSchema) {
  const auto entry = [](const std::string& body) { return file_bytes("{\"x\":" + body + "}", std::string(4, '\0')); };
  std::string msg = error_for(entry("{\"dtype\":1,\"shape\":[],\"data_offsets\":[0,4]}"));
  EXPECT_HAS(msg, "tensor 'x'");
  EXPECT_HAS(msg, "\"dtype\" must be a string");
  msg = error_for(entry("{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}"));
  EXPECT_HAS(msg, "tensor 'x'");
  EXPECT_HAS(msg, "\"shape\" must be a list of non-negative integers");
  EXPECT_HAS(error_for(entry("{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}")), "non-negative integers");
  EXPECT_HAS(error_for(entry("{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}")), "non-negative integers");
  EXPECT_HAS(error_for(entry("{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}")), "non-negative integers");
  msg = error_for(entry("{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4,4]}"));
  EXPECT_HAS(msg, "tensor 'x'");
  EXPECT_HAS(msg, "\"data_offsets\" must be two non-negative integers");
  EXPECT_HAS(error_for(entry("{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0]}")), "two non-negative integers");
  EXPECT_HAS(error_for(entry("{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,\"4\"]}")), "two non-negative integers");
  EXPECT_HAS(error_for(entry("{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[-4,0]}")), "two non-negative integers");
  EXPECT_HAS(error_for(entry("{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":{\"a\":0}}")), "two non-negative integers");
  EXPECT_HAS(error_for(entry("{\"shape\":[],\"data_offsets\":[0,4]}")), "missing \"dtype\"");
  EXPECT_HAS(error_for(entry("{\"dtype\":\"F32\",\"data_offsets\":[0,4]}")), "missing \"shape\"");
  EXPECT_HAS(error_for(entry("{\"dtype\":\"F32\",\"shape\":[]}")), "missing \"data_offsets\"");
  EXPECT_HAS(error_for(entry("5")), "entry must be an object");
  EXPECT_HAS(error_for(file_bytes("[1,2]")), "header must be a JSON object");
  msg = error_for(file_bytes("{\"__metadata__\":{\"k\":1}}"));
  EXPECT_HAS(msg, "\"__metadata__\" value of key \"k\" must be a string");
  EXPECT_HAS(error_for(file_bytes("{\"__metadata__\":[\"k\"]}")), "\"__metadata__\" must map strings to strings");
}

TEST(Safetensors, RejectsAnUnknownDtypeString) {
  const std::string msg =
      error_for(file_bytes("{\"x\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", std::string(4, '\0')));
  EXPECT_HAS(msg, "tensor 'x'");
  EXPECT_HAS(msg, "unknown dtype \"F33\"");
  EXPECT_HAS(error_for(file_bytes("{\"x\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", std::string(4, '\0'))),
             "unknown dtype \"f32\"");  // case matters
}

TEST(Safetensors, RejectsGapsBetweenTensorsAndAFirstTensorNotAtZero) {
  std::string msg = error_for(file_bytes(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
      std::string(12, '\0')));
  EXPECT_HAS(msg, "tensor 'b': invalid data_offsets [8, 12]");
  EXPECT_HAS(msg, "expected it to begin at byte 4");
  msg = error_for(file_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", std::string(8, '\0')));
  EXPECT_HAS(msg, "tensor 'a': invalid data_offsets [4, 8]");
}

TEST(Safetensors, RejectsOverlappingTensors) {
  const std::string msg = error_for(file_bytes(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
      std::string(12, '\0')));
  EXPECT_HAS(msg, "tensor 'b': invalid data_offsets [4, 12]");
}

TEST(Safetensors, RejectsTheJsonAttackOfManyTensorsSharingOneRange) {
  // The reference's test_json_attack: ten tensors all claiming [0, 16] of a 16-byte buffer.
  std::string json = "{";
  for (int i = 0; i < 10; ++i) {
    if (i) json += ",";
    json += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}";
  }
  json += "}";
  const std::string msg = error_for(file_bytes(json, std::string(16, '\0')));
  EXPECT_HAS(msg, "tensor 't1': invalid data_offsets [0, 16]");
}

TEST(Safetensors, RejectsAnEndBeforeTheBegin) {
  const std::string msg = error_for(file_bytes(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,2]}}",
      std::string(4, '\0')));
  EXPECT_HAS(msg, "tensor 'c': invalid data_offsets [4, 2]");
}

TEST(Safetensors, RejectsShapesWhoseSizeOverflows) {
  // The reference's test_validation_overflow: shape [2, 2^64 - 2].
  std::string msg = error_for(file_bytes(
      "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,18446744073709551614],\"data_offsets\":[0,16]}}",
      std::string(16, '\0')));
  EXPECT_HAS(msg, "tensor 'x'");
  EXPECT_HAS(msg, "overflows 64 bits (number of elements)");
  // Elements fit, bits do not: 2^62 elements of 32 bits.
  msg = error_for(file_bytes(
      "{\"x\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,16]}}",
      std::string(16, '\0')));
  EXPECT_HAS(msg, "overflows 64 bits (size in bits)");
  // A huge dimension beside a 0 is valid for the reference, but attn cannot index it.
  msg = error_for(file_bytes(
      "{\"x\":{\"dtype\":\"F32\",\"shape\":[0,9223372036854775808],\"data_offsets\":[0,0]}}"));
  EXPECT_HAS(msg, "too large to index with int64");
}

TEST(Safetensors, RejectsSubByteTensorsThatAreNotWholeBytes) {
  const std::string msg =
      error_for(file_bytes("{\"q\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", std::string(2, '\0')));
  EXPECT_HAS(msg, "tensor 'q'");
  EXPECT_HAS(msg, "12 bits, not a whole number of bytes");
  EXPECT_HAS(error_for(file_bytes("{\"q\":{\"dtype\":\"F6_E2M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", std::string(2, '\0'))),
             "not a whole number of bytes");
}

TEST(Safetensors, RejectsAByteLengthThatDoesNotMatchShapeAndDtype) {
  // The reference's test_invalid_info: [2, 2] I32 with only 4 bytes.
  const std::string msg =
      error_for(file_bytes("{\"x\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,4]}}", std::string(4, '\0')));
  EXPECT_HAS(msg, "tensor 'x'");
  EXPECT_HAS(msg, "hold 4 bytes, but dtype I32 and shape [2, 2] need 16 bytes");
}

TEST(Safetensors, RejectsTrailingBytesAfterTheLastTensorAndATruncatedBuffer) {
  const std::string json = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  std::string msg = error_for(file_bytes(json, std::string(9, '\0')));
  EXPECT_HAS(msg, "the tensors end at byte 8 of the byte buffer, but the file holds 9 data bytes");
  EXPECT_HAS(msg, "trailing bytes");
  msg = error_for(file_bytes(json, std::string(4, '\0')));
  EXPECT_HAS(msg, "file truncated");
  EXPECT_HAS(error_for(file_bytes("{}", "x")), "trailing bytes");
}

TEST(Safetensors, RejectsDuplicateKeys) {
  const std::string msg = error_for(file_bytes(
      "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
      std::string(4, '\0')));
  EXPECT_HAS(msg, "duplicate key \"x\"");
  EXPECT_HAS(error_for(file_bytes("{\"x\":{\"dtype\":\"F32\",\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,4]}}",
                                  std::string(4, '\0'))),
             "duplicate key \"dtype\"");
}

TEST(Safetensors, RejectsDeeplyNestedHeaderWithoutCrashing) {
  const std::string json = "{\"__metadata__\":" + std::string(200'000, '[') + std::string(200'000, ']') + "}";
  EXPECT_HAS(error_for(file_bytes(json)), "nested deeper than 128");
}

TEST(Safetensors, AcceptsAFileWithOnlyEmptyAndScalarTensors) {
  // The reference's test_zero_sized_tensor, plus a scalar: both valid.
  const std::string json =
      "{\"e\":{\"dtype\":\"F64\",\"shape\":[2,0],\"data_offsets\":[0,0]},"
      "\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}";
  TempDir dir;
  const SafetensorsFile f = SafetensorsFile::open(write_raw(dir, file_bytes(json, bytes_of<double>({-0.5}))));
  EXPECT_EQ(f.get("e").shape(), (Shape{2, 0}));
  EXPECT_EQ(f.get("e").numel(), 0);
  EXPECT_EQ(f.get("s").item(), -0.5);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"e", "s"}));
}

}  // namespace
}  // namespace attn::io
