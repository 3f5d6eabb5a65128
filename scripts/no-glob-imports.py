#!/usr/bin/env python3
"""Lists glob imports (`use …::*;`) in product code and exits 1 when there is one (PLAN.md §14,
issue 36): every .rs file under crates/*/src and src/, except test code (files named tests.rs,
files under a tests/ folder, and the body of a `#[cfg(test)]` module, where `use super::*` is
the habit). A glob hides what a file takes from another, which is how import circles stayed
unseen (the bench's 30-file circle, issue 30); naming each import keeps a drawing of the
imports and a reader's grep honest. Run from the repository's root: `python3
scripts/no-glob-imports.py [ROOT]`."""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
glob = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?use\s+[^;]*\*\s*;")
test_mod = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{")
hits = []
for base in ["crates", "src"]:
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, base)):
        dirnames.sort()
        parts = dirpath.split(os.sep)
        if "tests" in parts or "target" in parts:
            continue
        for name in sorted(filenames):
            if not name.endswith(".rs") or name == "tests.rs":
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            depth = 0
            test_depth = None  # brace depth at which a #[cfg(test)] module opened
            cfg_test = False  # a #[cfg(test)] waits for the item it applies to
            for number, line in enumerate(lines, 1):
                text = line.strip()
                if text.startswith("//"):
                    continue
                if text.startswith("#[cfg(test)]"):
                    cfg_test = True
                if test_depth is None and glob.match(line):
                    hits.append(f"{path}:{number}: {text}")
                if cfg_test and test_mod.match(line):
                    test_depth = depth
                    cfg_test = False
                elif cfg_test and text and not text.startswith("#"):
                    cfg_test = False
                depth += line.count("{") - line.count("}")
                if test_depth is not None and depth <= test_depth:
                    test_depth = None
for hit in hits:
    print(hit)
if hits:
    print("glob imports in product code (above); name each import (PLAN.md §14)")
sys.exit(1 if hits else 0)
