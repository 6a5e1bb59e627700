#!/usr/bin/env python3
"""clang-tidy with the checks of .clang-tidy (warnings as errors) over every library and CLI source
of the build's compile_commands.json (tests are left out), in parallel. CI runs it.

  scripts/tidy.py [BUILD_DIR] [FILE...]   # default: build, every source
"""
import concurrent.futures
import json
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    args = sys.argv[1:]
    build = pathlib.Path(args.pop(0)) if args and not args[0].endswith((".cc", ".cu")) else \
        ROOT / "build"
    db = build / "compile_commands.json"
    if not db.exists():
        sys.exit(f"tidy: {db} is missing: configure the build first (scripts/test.sh)")
    tidy = shutil.which("clang-tidy")
    if tidy is None:
        sys.exit("tidy: clang-tidy is not installed (scripts/setup.sh --dev installs it)")
    files = sorted({pathlib.Path(c["file"]).resolve() for c in json.loads(db.read_text())})
    files = [f for f in files if f.is_relative_to(ROOT) and f.suffix == ".cc"
             and f.relative_to(ROOT).parts[0] not in ("build", "tests")]
    if args:
        wanted = {(ROOT / a).resolve() for a in args}
        files = [f for f in files if f in wanted]
    failed = []

    def run(f):
        return f, subprocess.run([tidy, "-p", str(build), "--quiet", str(f)], capture_output=True,
                                 text=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for f, r in pool.map(run, files):
            if r.returncode != 0:
                failed.append(f)
                sys.stderr.write(r.stdout + r.stderr)
    if failed:
        print(f"tidy: {len(failed)} of {len(files)} files have findings", file=sys.stderr)
        return 1
    print(f"tidy: {len(files)} files clean under .clang-tidy's checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
