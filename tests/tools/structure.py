#!/usr/bin/env python3
"""Function and file lengths of the product code (docs/development.md, "Structure, measured").

    python3 tests/tools/structure.py [--over 80] [crate/src ...]

A function's length is counted from the line of its `fn` keyword to the line of its closing
brace, both included (attributes and doc comments before it are not counted; a nested fn is
counted on its own and inside its parent). Test code is left out: `*_tests.rs` and `tests.rs`
files, files declared by `#[cfg(test)] mod x;`, and every item under `#[cfg(test)]`. Comments,
strings and character literals are blanked before braces are matched. A file's length is its
line count (`wc -l`); test files are left out of the longest-file figure.
"""

import re
import sys
from pathlib import Path

CRATES = ["signal-svc/src", "signal-svc/core/src", "actuator-svc/src", "actuator-svc/lb/src", "cutoverctl/src", "runtime/src"]


def blank(text):
    """The text with comments, strings and char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)

    def keep_newlines(s):
        return "".join("\n" if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep_newlines(text[i:j]))
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i:])) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(keep_newlines(text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(keep_newlines(text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the former is blanked.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(" " * m.end())
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_brace(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def body_span(code, start):
    """(open, close) of the block of the item starting at `start`, or None for `...;`."""
    for j in range(start, len(code)):
        if code[j] == ";":
            return None
        if code[j] == "{":
            return j, match_brace(code, j)
    return None


def line_of(code, at):
    return code.count("\n", 0, at) + 1


def analyse(path):
    """The file's functions [(name, line, length)] outside test code, and the test module files
    it declares."""
    code = blank(path.read_text())
    excluded, test_files = [], []
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        span = body_span(code, m.end())
        if span:
            excluded.append((m.start(), span[1]))
        else:
            decl = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code[m.end():])
            if decl:
                name = decl.group(1)
                base = path.parent if path.name in ("lib.rs", "main.rs", "mod.rs") else path.with_suffix("")
                test_files += [base / f"{name}.rs", base / name / "mod.rs"]
    impls = []
    for m in re.finditer(r"\b(impl|trait)\b", code):
        span = body_span(code, m.end())
        if not span:
            continue
        header = code[m.end():span[0]]
        header = re.sub(r"<[^<>]*(<[^<>]*(<[^<>]*>[^<>]*)*>[^<>]*)*>", "", header)
        header = header.split(" where ")[0]
        target = header.split(" for ")[-1].strip()
        ident = re.findall(r"\w+", target)
        impls.append((span[0], span[1], ident[-1] if ident else "?"))
    fns = []
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        if any(a <= m.start() <= b for a, b in excluded):
            continue
        span = body_span(code, m.end())
        if not span:
            continue
        owner = [t for a, b, t in impls if a < m.start() < b]
        name = f"{owner[-1]}::{m.group(1)}" if owner else m.group(1)
        first, last = line_of(code, m.start()), line_of(code, span[1])
        fns.append((name, first, last - first + 1))
    return fns, test_files


def is_test_file(path, test_files):
    return path.name.endswith("_tests.rs") or path.name == "tests.rs" or path in test_files


def main(argv):
    over = 80
    if "--over" in argv:
        at = argv.index("--over")
        over = int(argv[at + 1])
        del argv[at : at + 2]
    roots = [Path(a) for a in argv] or [Path(c) for c in CRATES]
    for root in roots:
        files = sorted(root.rglob("*.rs"))
        test_files, found = [], []
        for f in files:
            fns, tests = analyse(f)
            test_files += tests
            found.append((f, fns))
        product = [(f, fns) for f, fns in found if not is_test_file(f, test_files)]
        long = sorted(
            ((length, f, line, name) for f, fns in product for name, line, length in fns if length > over),
            reverse=True,
        )
        sizes = sorted(((len(f.read_text().splitlines()), f) for f, _ in product), reverse=True)
        total = sum(n for n, _ in sizes)
        count = sum(len(fns) for _, fns in product)
        print(f"## {root}: {len(product)} files, {total} lines, {count} functions")
        print(f"longest file: {sizes[0][1]} ({sizes[0][0]} lines)")
        print(f"functions over {over} lines: {len(long)} (over 100: {sum(1 for l in long if l[0] > 100)})")
        for length, f, line, name in long:
            print(f"  {length:4}  {f}:{line}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
