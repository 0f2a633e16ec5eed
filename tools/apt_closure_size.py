#!/usr/bin/env python3
"""apt_closure_size.py — what `apt-get install --no-install-recommends PKG...` would fetch on a
Debian machine that has only its required and important packages: the dependency closure of
the packages (apt-cache depends --recurse, Depends and PreDepends), less the packages of
priority required or important, with their download and installed sizes from apt-cache show.
It reads the local package lists and installs nothing; the closure takes, of alternatives, the
first one, as apt does by default.

  apt_closure_size.py PKG...    prints: packages, download MB, installed MB
"""
import subprocess
import sys


def closure(packages):
    out = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
         "--no-breaks", "--no-replaces", "--no-enhances", *packages],
        capture_output=True, text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        if line and not line.startswith(" ") and not line.startswith("<"):
            names.add(line.strip())
    return names


def records(names):
    """name -> {field: value} of the candidate version, from one apt-cache show call."""
    out = subprocess.run(["apt-cache", "show", "--no-all-versions", *names],
                         capture_output=True, text=True).stdout
    found = {}
    for block in out.split("\n\n"):
        info = {}
        for line in block.splitlines():
            if ":" in line and not line.startswith(" "):
                key, value = line.split(":", 1)
                info.setdefault(key, value.strip())
        if "Package" in info:
            found.setdefault(info["Package"], info)
    return found


def main(packages):
    if not packages:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    count, size, installed = 0, 0, 0
    for info in records(sorted(closure(packages))).values():
        if info.get("Priority") in ("required", "important"):
            continue  # a virtual package, or one every Debian machine has
        count += 1
        size += int(info.get("Size", 0))
        installed += int(info.get("Installed-Size", 0)) * 1024
    print(f"{count} packages, {size / 1e6:.0f} MB download, {installed / 1e6:.0f} MB installed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
