// io/unicode_categories.cpp — the four classes of GPT-2's pre-tokenization pattern, read from
// ICU's Unicode character database (Debian's libicu-dev): \s is the White_Space property,
// \p{L} the general categories Lu Ll Lt Lm Lo, \p{N} the categories Nd Nl No. ICU is the
// well-kept source of these properties; nothing here is a table of our own.
#include "unicode_categories.h"

#include <unicode/uchar.h>
#include <unicode/uversion.h>

namespace attn::io::unicode {

CodeClass code_class(char32_t c) {
  if (c > 0x10FFFF) return CodeClass::Other;
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_WHITE_SPACE)) return CodeClass::Space;
  switch (u_charType(u)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CodeClass::Letter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return CodeClass::Number;
    default:
      return CodeClass::Other;
  }
}

const char* unicode_version() { return U_UNICODE_VERSION; }

}  // namespace attn::io::unicode
