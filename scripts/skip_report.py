#!/usr/bin/env python3
"""Counts the tests the last CTest run skipped, by reason, from <build>/Testing/Temporary/LastTest.log.

Reasons: an outside golden not present (a fidelity check against a file published elsewhere, read
from ../shared/data or $LAMINAR_SHARED_DATA), no GPU, a benchmark peer not installed
(scripts/setup.sh --bench), and anything else. Prints one line per reason.

  scripts/skip_report.py build                  # report
  scripts/skip_report.py build --only-goldens   # and exit 1 when a test skipped for another
                                                # reason than an outside golden, a GPU or a peer
  scripts/skip_report.py build --golden-regex   # only print a ctest -R regex matching the tests
                                                # that skipped for an outside golden (empty: none)
"""
import argparse
import pathlib
import re
import sys

GOLDEN = "outside golden not present: "
REASONS = [
    ("outside goldens not present", lambda m: m.startswith(GOLDEN)),
    ("no GPU here", lambda m: "no CUDA device" in m or "built without NCCL" in m),
    ("benchmark peers not installed (scripts/setup.sh --bench)",
     lambda m: "no benchmark venv" in m),
]


def skipped_tests(log: str):
    """{test name: skip message} for every test whose output says it was skipped."""
    out = {}
    blocks = re.split(r"^\d+/\d+ Testing: ", log, flags=re.M)[1:]
    for block in blocks:
        name = block.split("\n", 1)[0].strip()
        if "[  SKIPPED ]" not in block:
            continue
        m = re.search(r": Skipped\n(.*)\n", block)
        out[name] = m.group(1).strip() if m else ""
    return out


def cmake_regex_escape(text: str) -> str:
    """`text` as a CMake regular expression (ctest -R) matching exactly it."""
    return re.sub(r"([.^$*+?()\[\]|\\])", r"\\\1", text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--only-goldens", action="store_true")
    ap.add_argument("--golden-regex", action="store_true")
    args = ap.parse_args()
    log_path = pathlib.Path(args.build) / "Testing" / "Temporary" / "LastTest.log"
    if not log_path.exists():
        print(f"skip_report: {log_path} not found (run the tests first)", file=sys.stderr)
        return 2
    skipped = skipped_tests(log_path.read_text(errors="replace"))
    by_reason = {label: [] for label, _ in REASONS}
    other = []
    for name, message in sorted(skipped.items()):
        for label, match in REASONS:
            if match(message):
                by_reason[label].append(name)
                break
        else:
            other.append((name, message))
    if args.golden_regex:
        names = by_reason[REASONS[0][0]]
        if names:
            print("^(" + "|".join(cmake_regex_escape(n) for n in names) + ")$")
        return 0
    for label, names in by_reason.items():
        if names:
            print(f"{len(names)} tests skipped: {label}")
    for name, message in other:
        print(f"skipped for another reason: {name}: {message or '(no message)'}")
    if not skipped:
        print("0 tests skipped")
    if args.only_goldens and other:
        print(f"skip_report: {len(other)} test(s) skipped for a reason a user's run must not have",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
