// attn/serve/www.h — the attention explorer's page (HTML, CSS, JavaScript written for it, in
// src/serve/www/), embedded into the library at build time (cmake/embed_files.cmake), so that
// `attn serve` serves it from any directory and when installed, without fetching anything.
// Not here: serving them (server.cpp), the JSON the page asks for (explorer.h).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace attn::serve::www {

struct File {
  const char* path;  // "/index.html", "/explorer.js", ...
  const char* mime;  // Content-Type
  const unsigned char* data;
  size_t size;
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data), size}; }
};

// Every embedded file.
const std::vector<File>& files();

}  // namespace attn::serve::www
