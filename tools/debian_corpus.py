#!/usr/bin/env python3
"""debian_corpus.py — an English-German parallel corpus from Debian's own translations.

    tools/debian_corpus.py --out DIR [--no-install] [--max-chars 300] [--valid-percent 2]
                           [--test-percent 4]

Two sources, both reachable through apt-get on a Debian 12 machine:

1. Package descriptions translated by Debian's description translation project (DDTP).
   `apt-get -o Acquire::Languages=en,de update` puts Translation-en and Translation-de under
   /var/lib/apt/lists/ (read with `apt-helper cat-file`, which undoes the lz4). An English and a
   German entry pair up when their Description-md5 is the same (the md5 of the English text the
   German was translated from). Each pair gives its short description (the first line) and,
   where the alignment is unambiguous, pieces of the long description:
     - the long descriptions are cut into paragraphs (" ." lines) and paragraphs into units
       (list items start a new unit: a line whose text starts with "*", "-", "+" or "o ");
     - paragraphs pair up only when both sides have the same number, units only when a
       paragraph has the same number of units on both sides, and sentences (split after . ! ?
       followed by a space and an upper-case letter, a digit or an opening quote) only when a
       unit has the same number of sentences on both sides; anything else is dropped;
     - every aligned pair must have a length ratio (characters) between 1/3 and 3.
2. The gettext catalogs (.mo) that a fixed list of well-translated packages (PACKAGES below)
   installs under /usr/share/locale/de/LC_MESSAGES/: each English msgid with its German msgstr
   (plural entries: the singular forms; message contexts dropped). Only the catalogs that
   `dpkg -L` lists for those packages are read, so the corpus does not depend on whatever else
   the machine has installed.

Every pair is cleaned the same way: whitespace runs become one space, pairs with an empty side,
identical sides (untranslated), no letter on one side (markup or numbers only), a control
character, or a side longer than --max-chars characters are dropped; exact duplicates are
removed. The split is by a hash of the English side (SHA-256 of its UTF-8 bytes, first 8 bytes
mod 10,000), so that an English sentence and all its translations land in one split only.

Writes DIR/train.tsv, DIR/valid.tsv, DIR/test.tsv (English TAB German, one pair per line,
sorted by the hash) and DIR/counts.json (pairs per source, per split, and what each filter
dropped), and checks its own output (fails loudly): no English side in two splits, no empty
side, no tab or newline inside a side, no duplicate pair, and at least --min-test test pairs.
Without --no-install it runs apt-get (root) to fetch the translation indexes and install
PACKAGES first.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import unicodedata

# Packages whose German catalogs are complete and well kept (checked in Debian 12): the GNU
# tools, the package tools, and iso-codes (country, language and currency names).
PACKAGES = [
    "coreutils", "findutils", "grep", "sed", "tar", "diffutils", "bash", "make", "m4", "gawk", "cpio",
    "gettext", "gettext-base", "wget", "dpkg", "libdpkg-perl", "apt", "adduser", "git", "gnupg-l10n",
    "binutils-common", "libc-l10n", "procps", "psmisc", "xz-utils", "man-db", "login", "util-linux-locales",
    "nano", "iso-codes", "debconf-i18n", "bison", "libpam-runtime",
]

LISTS = "/var/lib/apt/lists"
APT_HELPER = "/usr/lib/apt/apt-helper"
LOCALE_DIR = "/usr/share/locale/de/LC_MESSAGES/"


# ---- reading ------------------------------------------------------------------------------------

def cat_file(path):
    """The text of an apt list file, decompressed by apt-helper (lz4, gz, xz or plain)."""
    r = subprocess.run([APT_HELPER, "cat-file", path], capture_output=True, check=True)
    return r.stdout.decode("utf-8", errors="replace")


def translation_entries(lang):
    """{Description-md5: [lines of the description]} from every Translation-LANG index (the
    first entry of an md5 wins: packages that share a description share its translation)."""
    paths = sorted(glob.glob(os.path.join(LISTS, "*_i18n_Translation-%s*" % lang)))
    out = {}
    for path in paths:
        for stanza in cat_file(path).split("\n\n"):
            fields, key = {}, None
            for line in stanza.split("\n"):
                if line.startswith(" ") and key is not None:
                    fields[key].append(line[1:])
                elif ":" in line:
                    key, value = line.split(":", 1)
                    fields[key] = [value.strip()]
            md5, desc = fields.get("Description-md5"), fields.get("Description-%s" % lang)
            if md5 and desc and desc[0] and md5[0] not in out:
                out[md5[0]] = desc
    return out, paths


def read_mo(path):
    """(msgid, msgstr) pairs of a GNU .mo catalog (the singular forms; contexts dropped)."""
    data = open(path, "rb").read()
    if len(data) < 28:
        raise ValueError("%s: too short for a .mo file" % path)
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if order is None:
        raise ValueError("%s: not a .mo file (magic %#x)" % (path, magic))
    _, n, orig, trans = struct.unpack(order + "4I", data[4:20])
    pairs = []
    for i in range(n):
        ol, oo = struct.unpack(order + "2I", data[orig + 8 * i:orig + 8 * i + 8])
        tl, to = struct.unpack(order + "2I", data[trans + 8 * i:trans + 8 * i + 8])
        if oo + ol > len(data) or to + tl > len(data):
            raise ValueError("%s: entry %d points outside the file" % (path, i))
        msgid = data[oo:oo + ol].decode("utf-8", errors="replace")
        msgstr = data[to:to + tl].decode("utf-8", errors="replace")
        if msgid == "":
            continue  # the header
        msgid = msgid.split("\x04", 1)[-1].split("\x00", 1)[0]
        msgstr = msgstr.split("\x00", 1)[0]
        pairs.append((msgid, msgstr))
    return pairs


def package_catalogs(packages):
    """{package: [German .mo files it installs]} for the installed ones among `packages`."""
    out = {}
    for p in packages:
        r = subprocess.run(["dpkg", "-L", p], capture_output=True, text=True)
        if r.returncode != 0:
            continue
        files = sorted(f for f in r.stdout.split("\n") if f.startswith(LOCALE_DIR) and f.endswith(".mo")
                       and os.path.isfile(f))
        if files:
            out[p] = files
    return out


# ---- aligning descriptions ----------------------------------------------------------------------

LIST_ITEM = re.compile(r"^\s*([*+\-]|o )\s*")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-ZÄÖÜ0-9\"„»(])")


def paragraphs(lines):
    """The long description's paragraphs (lines after the first, split at '.' lines), each a
    list of units (a list item starts a new unit), each unit one string."""
    out, cur, unit = [], [], []
    for line in lines[1:] + ["."]:
        if line.strip() == ".":
            if unit:
                cur.append(" ".join(unit))
            if cur:
                out.append(cur)
            cur, unit = [], []
            continue
        if LIST_ITEM.match(line) and unit:
            cur.append(" ".join(unit))
            unit = []
        unit.append(line.strip())
    return out


def sentences(text):
    return [s for s in SENTENCE_END.split(text) if s.strip()]


def ratio_ok(a, b):
    la, lb = len(a), len(b)
    return la > 0 and lb > 0 and 1 / 3 <= la / lb <= 3


def align_description(en, de, dropped):
    """Aligned (en, de) pieces of one description pair, by the module's rules."""
    pairs = [(en[0], de[0])]
    pe, pd = paragraphs(en), paragraphs(de)
    if len(pe) != len(pd):
        dropped["paragraph_count"] += 1
        return pairs
    for ue, ud in zip(pe, pd):
        if len(ue) != len(ud):
            dropped["unit_count"] += 1
            continue
        for a, b in zip(ue, ud):
            a, b = LIST_ITEM.sub("", a), LIST_ITEM.sub("", b)
            se, sd = sentences(a), sentences(b)
            if len(se) != len(sd):
                dropped["sentence_count"] += 1
                continue
            aligned = list(zip(se, sd))
            if not all(ratio_ok(x, y) for x, y in aligned):
                dropped["length_ratio"] += 1
                continue
            pairs += aligned
    return pairs


# ---- cleaning and splitting ---------------------------------------------------------------------

def normalise(s):
    return " ".join(s.split())


def has_control(s):
    return any(unicodedata.category(c) == "Cc" for c in s)


def has_letter(s):
    return any(c.isalpha() for c in s)


def clean(pairs, max_chars, dropped):
    out = []
    for en, de in pairs:
        en, de = normalise(en), normalise(de)
        if not en or not de:
            dropped["empty"] += 1
        elif en == de:
            dropped["identical"] += 1
        elif not has_letter(en) or not has_letter(de):
            dropped["no_letter"] += 1
        elif has_control(en) or has_control(de):
            dropped["control_character"] += 1
        elif len(en) > max_chars or len(de) > max_chars:
            dropped["too_long"] += 1
        else:
            out.append((en, de))
    return out


def bucket(en):
    return int.from_bytes(hashlib.sha256(en.encode("utf-8")).digest()[:8], "big") % 10000


def split_of(en, valid_percent, test_percent):
    b = bucket(en)
    if b < test_percent * 100:
        return "test"
    if b < (test_percent + valid_percent) * 100:
        return "valid"
    return "train"


# ---- main ---------------------------------------------------------------------------------------

def install(packages):
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "-q", "-o", "Acquire::Languages=en,de", "update"], check=True, env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends"] + packages, check=True,
                   env=env)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--no-install", action="store_true", help="use the indexes and packages already on the machine")
    p.add_argument("--max-chars", type=int, default=300, help="longest side kept, in characters (300)")
    p.add_argument("--valid-percent", type=float, default=2.0)
    p.add_argument("--test-percent", type=float, default=4.0)
    p.add_argument("--min-test", type=int, default=2000, help="fewest test pairs accepted (2000)")
    args = p.parse_args()
    if not args.no_install:
        install(PACKAGES)

    counts = {"sources": {}, "dropped": {}, "splits": {}}
    dropped = {k: 0 for k in ("paragraph_count", "unit_count", "sentence_count", "length_ratio", "empty",
                              "identical", "no_letter", "control_character", "too_long", "duplicate")}
    by_source = {}

    en, en_paths = translation_entries("en")
    de, de_paths = translation_entries("de")
    if not en_paths or not de_paths:
        sys.exit("debian_corpus: no Translation-en or Translation-de under %s; run apt-get -o "
                 "Acquire::Languages=en,de update (or drop --no-install)" % LISTS)
    desc_short, desc_long = [], []
    for md5 in sorted(set(en) & set(de)):
        aligned = align_description(en[md5], de[md5], dropped)
        desc_short.append(aligned[0])
        desc_long += aligned[1:]
    by_source["descriptions_short"] = desc_short
    by_source["descriptions_long"] = desc_long
    counts["description_entries"] = {"en": len(en), "de": len(de), "paired": len(set(en) & set(de))}

    catalogs = package_catalogs(PACKAGES)
    missing = [p for p in PACKAGES if p not in catalogs]
    for package, files in sorted(catalogs.items()):
        pairs = []
        for f in files:
            pairs += read_mo(f)
        by_source["gettext:" + package] = pairs
    counts["packages_without_catalogs"] = missing

    seen, kept = set(), []
    for source in sorted(by_source):
        cleaned = clean(by_source[source], args.max_chars, dropped)
        n_before = len(kept)
        for pair in cleaned:
            if pair in seen:
                dropped["duplicate"] += 1
                continue
            seen.add(pair)
            kept.append(pair)
        counts["sources"][source] = {"raw": len(by_source[source]), "kept": len(kept) - n_before}
    counts["dropped"] = dropped

    splits = {"train": [], "valid": [], "test": []}
    for en_side, de_side in kept:
        splits[split_of(en_side, args.valid_percent, args.test_percent)].append((en_side, de_side))
    os.makedirs(args.out, exist_ok=True)
    for name, pairs in splits.items():
        pairs.sort(key=lambda x: (bucket(x[0]), x))
        tmp = os.path.join(args.out, name + ".tsv.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for a, b in pairs:
                f.write(a + "\t" + b + "\n")
        os.replace(tmp, os.path.join(args.out, name + ".tsv"))
        counts["splits"][name] = {"pairs": len(pairs), "en_chars": sum(len(a) for a, _ in pairs),
                                  "de_chars": sum(len(b) for _, b in pairs)}

    # Self-check, on what was written.
    english = {}
    problems = []
    for name in splits:
        with open(os.path.join(args.out, name + ".tsv"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines[-1] != "":
            problems.append("%s.tsv does not end with a newline" % name)
        pairs = set()
        for i, line in enumerate(lines[:-1], 1):
            parts = line.split("\t")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                problems.append("%s.tsv line %d: not two non-empty fields" % (name, i))
                continue
            if tuple(parts) in pairs:
                problems.append("%s.tsv line %d: duplicate pair" % (name, i))
            pairs.add(tuple(parts))
            other = english.setdefault(parts[0], name)
            if other != name:
                problems.append("English side in %s and %s: %r" % (other, name, parts[0][:60]))
    if counts["splits"]["test"]["pairs"] < args.min_test:
        problems.append("only %d test pairs (at least %d wanted: raise --test-percent)"
                        % (counts["splits"]["test"]["pairs"], args.min_test))
    counts["self_check"] = "ok" if not problems else problems[:20]
    with open(os.path.join(args.out, "counts.json"), "w") as f:
        json.dump(counts, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(json.dumps({k: counts[k] for k in ("splits", "description_entries")}, ensure_ascii=False))
    if problems:
        sys.exit("debian_corpus: self-check FAILED:\n  " + "\n  ".join(problems[:20]))


if __name__ == "__main__":
    main()
