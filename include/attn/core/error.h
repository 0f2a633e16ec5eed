// attn/core/error.h — the one error type of the library.
// Every failure (bad shape, bad dtype, malformed file, bad option) throws attn::Error
// with a message that names the operation and the offending values, as mlx does
// ("[op] ..."). The CLI turns it into a message on stderr and a non-zero exit.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace attn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates its arguments with operator<< into one string.
template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

// Throws attn::Error("[op] message...").
template <class... Args>
[[noreturn]] void fail(const char* op, Args&&... args) {
  throw Error(str_cat("[", op, "] ", std::forward<Args>(args)...));
}

}  // namespace attn

// ATTN_CHECK(cond, "op", message parts...): throws attn::Error when cond is false.
#define ATTN_CHECK(cond, op, ...)                  \
  do {                                             \
    if (!(cond)) ::attn::fail(op, __VA_ARGS__);    \
  } while (0)
