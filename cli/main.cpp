// attn — command-line entry point. Subcommands live in cmd_<name>.cpp.
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("attn %s\n", ATTN_VERSION);
    return 0;
  }
  std::fprintf(stderr, "usage: attn --version\n");
  return 2;
}
