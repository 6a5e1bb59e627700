#!/usr/bin/env python3
"""Checks laminar's library layering: every #include "folder/..." in a library's sources names a
folder that the library may use, as docs/architecture.md declares it between the markers
<!-- layers:begin --> and <!-- layers:end --> (one line per library: `folder : deps...`; a folder
may include itself and everything its deps may include, transitively). A lower library that
includes a higher one fails with the file, line and both folders. The CMake link dependencies
(laminar_library(... DEPS ...) and target_link_libraries in each folder's CMakeLists.txt) are held
to the same graph, so no library links a higher one (a rollout library never links the trainer).

  scripts/check_layers.py                 # check the source tree (exit 1 on a violation)
  scripts/check_layers.py --self-test     # also prove that a planted upward include is caught
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_SUFFIXES = {".h", ".cc", ".cu", ".cuh", ".c"}


def read_layers(doc: pathlib.Path):
    """{folder: [direct deps]} from the doc's marked block."""
    text = doc.read_text()
    begin, end = text.find("<!-- layers:begin -->"), text.find("<!-- layers:end -->")
    if begin < 0 or end < begin:
        sys.exit(f"check_layers: {doc}: no <!-- layers:begin --> ... <!-- layers:end --> block")
    layers = {}
    for n, line in enumerate(text[begin:end].splitlines(), start=text[:begin].count("\n") + 1):
        line = line.split("#", 1)[0].strip()
        if ":" not in line or line.startswith("<!--"):
            continue
        folder, deps = line.split(":", 1)
        folder = folder.strip()
        if folder in layers:
            sys.exit(f"check_layers: {doc}:{n}: library '{folder}' is listed twice")
        layers[folder] = deps.split()
    for folder, deps in layers.items():
        for dep in deps:
            if dep not in layers:
                sys.exit(f"check_layers: {doc}: '{folder}' depends on '{dep}', which is not listed")
    return layers


def closure(layers):
    """{folder: set of folders it may include}; exits on a cycle."""
    allowed = {}

    def visit(folder, path):
        if folder in path:
            sys.exit("check_layers: dependency cycle: " + " -> ".join(path + [folder]))
        if folder not in allowed:
            reach = {folder}
            for dep in layers[folder]:
                reach |= visit(dep, path + [folder])
            allowed[folder] = reach
        return allowed[folder]

    for folder in layers:
        visit(folder, [])
    return allowed


def owner(path: str, folders):
    """The listed folder that holds `path` (the longest prefix), or None."""
    best = None
    for folder in folders:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def violations(layers, files):
    """[(file, line, from folder, to folder, include)] for `files`: {relative path: text}."""
    allowed = closure(layers)
    found = []
    for rel, text in sorted(files.items()):
        src = owner(rel, layers)
        if src is None:
            continue
        for n, line in enumerate(text.splitlines(), start=1):
            m = INCLUDE.match(line)
            if not m:
                continue
            dst = owner(m.group(1), layers)
            if dst is not None and dst not in allowed[src]:
                found.append((rel, n, src, dst, m.group(1)))
    return found


def source_files(root: pathlib.Path, layers):
    files = {}
    for folder in layers:
        for p in (root / folder).rglob("*"):  # subfolders too (kernels/cpu, cli/bench)
            if p.suffix in SOURCE_SUFFIXES and p.is_file():
                files[p.relative_to(root).as_posix()] = p.read_text(errors="replace")
    return files


CMAKE_CALL = re.compile(r"\b(laminar_library|target_link_libraries)\s*\(([^)]*)\)", re.S)


def link_deps(root: pathlib.Path, layers):
    """({laminar target: folder}, [(folder, CMakeLists path, [laminar targets it links])])."""
    owner_of, links = {}, []
    for folder in layers:
        cmake = root / folder / "CMakeLists.txt"
        if not cmake.exists():
            continue
        text = re.sub(r"#[^\n]*", "", cmake.read_text())
        for kind, args in CMAKE_CALL.findall(text):
            words = args.split()
            if not words:
                continue
            if kind == "laminar_library":
                owner_of[words[0]] = folder
                deps = words[words.index("DEPS") + 1:] if "DEPS" in words else []
            else:
                deps = words[1:]
            links.append((folder, cmake.relative_to(root).as_posix(),
                          [d for d in deps if d.startswith("laminar_")]))
    return owner_of, links


def link_violations(layers, owner_of, links):
    """[(CMakeLists, folder, linked target, its folder)] for links against the layering."""
    allowed = closure(layers)
    found = []
    for folder, cmake, deps in links:
        for dep in deps:
            dst = owner_of.get(dep)
            if dst is not None and dst not in allowed[folder]:
                found.append((cmake, folder, dep, dst))
    return found


def report(found):
    for rel, n, src, dst, inc in found:
        print(f"{rel}:{n}: {src} includes \"{inc}\" of {dst}, which is not below it "
              f"(docs/architecture.md, Libraries)", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doc", default=str(ROOT / "docs" / "architecture.md"))
    ap.add_argument("--self-test", action="store_true",
                    help="also check that an include of a higher library is reported")
    args = ap.parse_args()
    layers = read_layers(pathlib.Path(args.doc))
    files = source_files(ROOT, layers)
    found = violations(layers, files)
    report(found)
    owner_of, links = link_deps(ROOT, layers)
    bad_links = link_violations(layers, owner_of, links)
    for cmake, folder, dep, dst in bad_links:
        print(f"{cmake}: {folder} links {dep} of {dst}, which is not below it "
              f"(docs/architecture.md, Libraries)", file=sys.stderr)
    if args.self_test:
        # Each library's first source and its most deeply nested one, made to include a header of
        # every library above it.
        allowed = closure(layers)
        planted = 0
        for low in layers:
            mine = sorted(r for r in files if owner(r, layers) == low)
            for high in layers:
                if not mine or high == low or low not in allowed[high] or high in allowed[low]:
                    continue
                deepest = max(mine, key=lambda r: (r.count("/"), r))
                for probe in {mine[0], deepest}:
                    if not violations(layers, {probe: f'#include "{high}/probe.h"\n'}):
                        print(f"check_layers: self-test: {probe} ({low}) including {high} went "
                              "unnoticed", file=sys.stderr)
                        return 1
                    planted += 1
        if planted == 0:
            print("check_layers: self-test: nothing to plant", file=sys.stderr)
            return 1
        # And a planted upward link: the lowest library linking every library not below it.
        for low in layers:
            mine = [entry for entry in links if entry[0] == low]
            for high, target in ((owner_of[t], t) for t in owner_of):
                if not mine or high == low or high in allowed[low]:
                    continue
                planted_link = [(low, mine[0][1], [target])]
                if not link_violations(layers, owner_of, planted_link):
                    print(f"check_layers: self-test: {low} linking {target} went unnoticed",
                          file=sys.stderr)
                    return 1
                planted += 1
        print(f"check_layers: self-test: {planted} planted upward includes and links all "
              "reported")
    if found or bad_links:
        print(f"check_layers: {len(found)} include(s) and {len(bad_links)} link(s) against the "
              "layering", file=sys.stderr)
        return 1
    print(f"check_layers: {len(files)} files and {sum(len(d) for _, _, d in links)} link "
          f"dependencies in {len(layers)} libraries follow the layering")
    return 0


if __name__ == "__main__":
    sys.exit(main())
