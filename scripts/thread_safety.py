#!/usr/bin/env python3
"""Clang's thread-safety analysis (-Wthread-safety) over every translation unit that uses the
annotated locks of core/mutex.h, with the flags CMake compiled it with (the build's
compile_commands.json), warnings as errors. GCC builds ignore the annotations; this is where they
are checked. A syntax-only pass: nothing is written.

  scripts/thread_safety.py [BUILD_DIR]     # default: build (configured by scripts/test.sh)
"""
import concurrent.futures
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)
ANNOTATED = re.compile(r"LAMINAR_(GUARDED_BY|REQUIRES|EXCLUDES|PT_GUARDED_BY)|MutexLock")
# GCC-only flags, and ones that need more than the headers (OpenMP's runtime).
DROP = {"-fopenmp"}
DROP_PREFIX = ("-fvect-cost-model", "-fno-semantic-interposition")


def annotated_sources(commands):
    """The compiled .cc files that use annotated locks, or that include (from the same folder) a
    header declaring them: the files implementing the annotated classes."""
    files = {pathlib.Path(c["file"]).resolve() for c in commands}
    headers = set()
    for h in ROOT.glob("**/*.h"):
        if "build" in h.relative_to(ROOT).parts[:1]:
            continue
        if ANNOTATED.search(h.read_text(errors="replace")):
            headers.add(h.resolve())
    out = []
    for f in sorted(files):
        if not f.is_relative_to(ROOT) or f.suffix != ".cc":
            continue
        rel = f.relative_to(ROOT)
        if rel.parts[0] in ("build", "tests"):
            continue
        text = f.read_text(errors="replace")
        own = {(ROOT / inc).resolve() for inc in INCLUDE.findall(text)}
        if ANNOTATED.search(text) or any(h in headers and h.parent == f.parent for h in own):
            out.append(f)
    return out


def clang_command(entry, clang):
    args = entry.get("arguments") or shlex.split(entry["command"])
    # The compiler (maybe behind ccache), then its flags.
    while args and (args[0].endswith("ccache") or not args[0].startswith("-")):
        if args[0].endswith(("c++", "g++", "gcc", "cc", "clang++", "clang")):
            args = args[1:]
            break
        args = args[1:]
    flags, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT"):
            skip = True
            continue
        if a in DROP or a.startswith(DROP_PREFIX) or a in ("-MD", "-c") or a == entry["file"]:
            continue
        flags.append(a)
    return [clang, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
            "-Wno-unknown-warning-option", "-Wno-unused-command-line-argument"] + flags + \
        [entry["file"]]


def main():
    build = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build")
    db = build / "compile_commands.json"
    if not db.exists():
        sys.exit(f"thread_safety: {db} is missing: configure the build first (scripts/test.sh)")
    clang = shutil.which("clang++")
    if clang is None:
        sys.exit("thread_safety: clang++ is not installed (scripts/setup.sh --dev installs it)")
    commands = json.loads(db.read_text())
    by_file = {str(pathlib.Path(c["file"]).resolve()): c for c in commands}
    sources = annotated_sources(commands)
    if not sources:
        sys.exit("thread_safety: no translation unit uses core/mutex.h; nothing was checked")
    failed = []

    def check(f):
        entry = by_file[str(f)]
        r = subprocess.run(clang_command(entry, clang), cwd=entry["directory"],
                           capture_output=True, text=True)
        return f, r

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for f, r in pool.map(check, sources):
            if r.returncode != 0:
                failed.append(f)
                sys.stderr.write(r.stdout + r.stderr)
    if failed:
        print(f"thread_safety: {len(failed)} of {len(sources)} files fail the analysis",
              file=sys.stderr)
        return 1
    print(f"thread_safety: {len(sources)} files pass clang's -Wthread-safety "
          f"({', '.join(str(f.relative_to(ROOT)) for f in sources)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
