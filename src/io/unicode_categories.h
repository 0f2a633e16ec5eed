// io/unicode_categories.h (private) — the four classes into which GPT-2's pre-tokenization
// pattern sorts code points: \s (the White_Space property), \p{L} (letters, general category
// L*), \p{N} (numbers, N*) and everything else, as ICU's character database gives them.
// No other Unicode property is provided here.
#pragma once

namespace attn::io::unicode {

enum class CodeClass { Other, Space, Letter, Number };

// The class of one code point (anything above U+10FFFF is Other).
CodeClass code_class(char32_t c);

// The Unicode version of the ICU database in use, e.g. "15.0".
const char* unicode_version();

}  // namespace attn::io::unicode
