// A tiny XML well-formedness checker for the report tests: balanced and properly nested tags,
// quoted attributes, no raw '<' or stray '&' in text or attribute values, one root element.
// Not a validating parser: no DTDs, no namespaces, no CDATA; enough for the SVG we write.
#pragma once

#include <cctype>
#include <map>
#include <string>
#include <vector>

namespace attn::test {

struct XmlSummary {
  std::string error;                    // empty when well-formed
  std::map<std::string, int> elements;  // element name -> count
};

namespace xml_detail {

inline bool valid_entity(const std::string& s, size_t amp, size_t* end) {
  const size_t semi = s.find(';', amp);
  if (semi == std::string::npos || semi - amp > 10) return false;
  const std::string name = s.substr(amp + 1, semi - amp - 1);
  bool ok = name == "amp" || name == "lt" || name == "gt" || name == "quot" || name == "apos";
  if (!ok && name.size() > 1 && name[0] == '#') {
    ok = true;
    for (size_t i = 1; i < name.size(); ++i) ok = ok && std::isdigit(static_cast<unsigned char>(name[i]));
  }
  *end = semi;
  return ok;
}

// Checks character data between markup; returns an error or "".
inline std::string check_text(const std::string& s, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    if (s[i] == '&') {
      size_t e = 0;
      if (!valid_entity(s, i, &e)) return "bad entity at offset " + std::to_string(i);
      i = e;
    }
  }
  return "";
}

}  // namespace xml_detail

inline XmlSummary check_xml(const std::string& s) {
  XmlSummary out;
  std::vector<std::string> stack;
  int roots = 0;
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    out.error = why + " (offset " + std::to_string(i) + ")";
    return out;
  };
  while (i < s.size()) {
    const size_t lt = s.find('<', i);
    const size_t text_end = lt == std::string::npos ? s.size() : lt;
    if (const std::string e = xml_detail::check_text(s, i, text_end); !e.empty()) return fail(e);
    if (stack.empty()) {
      for (size_t k = i; k < text_end; ++k) {
        if (!std::isspace(static_cast<unsigned char>(s[k]))) return fail("text outside the root element");
      }
    }
    if (lt == std::string::npos) break;
    i = lt;
    if (s.compare(i, 4, "<!--") == 0) {
      const size_t e = s.find("-->", i);
      if (e == std::string::npos) return fail("unterminated comment");
      i = e + 3;
      continue;
    }
    if (s.compare(i, 2, "<?") == 0) {
      const size_t e = s.find("?>", i);
      if (e == std::string::npos) return fail("unterminated declaration");
      i = e + 2;
      continue;
    }
    if (s.compare(i, 2, "</") == 0) {
      const size_t e = s.find('>', i);
      if (e == std::string::npos) return fail("unterminated end tag");
      std::string name = s.substr(i + 2, e - i - 2);
      while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
      if (stack.empty() || stack.back() != name) {
        return fail("end tag </" + name + "> does not match <" + (stack.empty() ? "" : stack.back()) + ">");
      }
      stack.pop_back();
      i = e + 1;
      continue;
    }
    // Start tag: name, then attributes name="value", then > or />.
    size_t k = i + 1;
    while (k < s.size() &&
           (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '-' || s[k] == ':' || s[k] == '_'))
      ++k;
    const std::string name = s.substr(i + 1, k - i - 1);
    if (name.empty()) return fail("empty tag name");
    bool self_closing = false;
    while (true) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k >= s.size()) return fail("unterminated start tag <" + name);
      if (s[k] == '>') {
        ++k;
        break;
      }
      if (s.compare(k, 2, "/>") == 0) {
        self_closing = true;
        k += 2;
        break;
      }
      const size_t a = k;
      while (k < s.size() &&
             (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '-' || s[k] == ':' || s[k] == '_'))
        ++k;
      if (k == a) return fail("bad attribute in <" + name + ">");
      if (k >= s.size() || s[k] != '=') return fail("attribute without value in <" + name + ">");
      ++k;
      if (k >= s.size() || (s[k] != '"' && s[k] != '\'')) return fail("unquoted attribute in <" + name + ">");
      const char quote = s[k];
      const size_t vbegin = ++k;
      const size_t vend = s.find(quote, vbegin);
      if (vend == std::string::npos) return fail("unterminated attribute value in <" + name + ">");
      if (s.substr(vbegin, vend - vbegin).find('<') != std::string::npos) return fail("raw '<' in attribute");
      if (const std::string e = xml_detail::check_text(s, vbegin, vend); !e.empty()) return fail(e);
      k = vend + 1;
    }
    if (stack.empty()) ++roots;
    ++out.elements[name];
    if (!self_closing) stack.push_back(name);
    i = k;
  }
  if (!stack.empty()) return fail("unclosed <" + stack.back() + ">");
  if (roots != 1) return fail("expected one root element, found " + std::to_string(roots));
  return out;
}

// Occurrences of `needle` in `hay`.
inline int count_of(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

}  // namespace attn::test
