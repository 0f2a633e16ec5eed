// Running the `attn` executable from end-to-end tests: ATTN_BINARY (a compile definition of the
// e2e test target) through the shell, in a working folder, with stdin from a string and stdout
// and stderr captured through files there. One copy for every e2e file that drives the CLI.
// Not here: the tests' data or model fixtures (each file keeps its own).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "attn/io/atomic_file.h"

namespace attn::test {

struct Outcome {
  int exit_code = -1;  // -1: not run, or ended by a signal
  std::string out, err;
};

// Runs `ATTN_BINARY args` in folder `dir` with `input` on stdin; dir/stdin.txt, stdout.txt and
// stderr.txt are overwritten.
inline Outcome run_attn_in(const std::string& dir, const std::string& args, const std::string& input = "") {
  const std::string in = dir + "/stdin.txt", out = dir + "/stdout.txt", err = dir + "/stderr.txt";
  io::write_file_atomic(in, input);
  const std::string cmd = std::string("cd '") + dir + "' && '" + ATTN_BINARY + "' " + args + " <'" + in + "' >'" +
                          out + "' 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  Outcome r;
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = io::read_file(out);
  r.err = io::read_file(err);
  return r;
}

// The same in a temporary folder object with a `path` member (models::test_util::TempDir).
template <class Dir>
Outcome run_attn(const Dir& dir, const std::string& args, const std::string& input = "") {
  return run_attn_in(dir.path, args, input);
}

// A failure the command reported itself: exit status 1..125 (not a crash or a signal) and
// `needle` in its stderr.
inline void expect_clean_failure(const Outcome& r, const std::string& needle) {
  EXPECT_GE(r.exit_code, 1) << r.err;
  EXPECT_LE(r.exit_code, 125) << "killed by a signal or not run: " << r.exit_code << "\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.err;
}

}  // namespace attn::test
