#!/usr/bin/env python3
"""The structure rules CMake cannot check (issue 25), run by ctest as `structure`.

- No source file over 800 lines, and no function over 150, unless scripts/structure-allow.json
  lists it with the reason (an entry that is no longer needed is an error too, so the list only
  shrinks).
- No model-type test (modelType == "...") outside core/model/families/: code asks the family's
  traits, never its name.
- No parallelism in the simulator outside core/sim/parallel/: the run loop knows no strategy.
- Every "Note [Name]" the code cites is a note of docs/estimator.md.

Layering itself is CMake's: each layer of core is a library that links only the layers below it,
so an include that points upward does not compile.
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILE_LINES = 800
FUNCTION_LINES = 150
SOURCES = ("core", "app", "probes")
MODEL_TYPE_TEST = re.compile(r'modelType\s*[!=]=\s*"|"\s*[!=]=\s*\w*\.?modelType\b')
PARALLEL = re.compile(r"\b(fsdp\w*|Fsdp\w*|ddp\w*|Ddp\w*|zeroStage|worldSize|reduceScatter\w*|allGather\w*)\b")


def sources():
    for top in SOURCES:
        for p in sorted((ROOT / top).rglob("*")):
            if p.suffix in (".cpp", ".h", ".py") and p.is_file():
                yield p


def strip_cpp(text):
    """The code without comments and string or character literals (their length kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def cpp_functions(text):
    """(name, first line, lines) of each outermost function body in C++ source."""
    code = strip_cpp(text)
    found, stack, i = [], [], 0
    while i < len(code):
        c = code[i]
        if c == "{":
            head = code[max(0, i - 400):i]
            head = head[max(head.rfind(";"), head.rfind("}"), head.rfind("{")) + 1:]
            inside_function = any(kind == "function" for kind, _, _ in stack)
            m = re.search(r"([~\w:]+)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*(?:const|override|noexcept|final|mutable|->\s*[\w:<>,\s*&]+|\s)*$", head)
            if m and re.search(r"\)\s*:\s*[\w:]+\s*[({]", head):  # a constructor's initialiser list
                m = re.search(r"([~\w:]+)\s*\(", head)
            is_function = (not inside_function and m is not None
                           and not re.match(r"(if|for|while|switch|catch|return)$", m.group(1))
                           and not re.search(r"\b(class|struct|namespace|enum|union)\b", head))
            stack.append(("function" if is_function else "block", m.group(1) if is_function else "", i))
        elif c == "}" and stack:
            kind, name, start = stack.pop()
            if kind == "function":
                first = code.count("\n", 0, start) + 1
                last = code.count("\n", 0, i) + 1
                found.append((name, first, last - first + 1))
        i += 1
    return found


def python_functions(text):
    lines = text.split("\n")
    found = []
    for k, line in enumerate(lines):
        m = re.match(r"(\s*)(?:async\s+)?def\s+(\w+)", line)
        if not m:
            continue
        indent, end = len(m.group(1)), k + 1
        for j in range(k + 1, len(lines)):
            s = lines[j]
            if s.strip() and not s.lstrip().startswith("#") and len(s) - len(s.lstrip()) <= indent:
                break
            if s.strip():
                end = j + 1
        found.append((m.group(2), k + 1, end - k))
    # only outermost: a nested def is part of its enclosing one
    outer = []
    for f in found:
        if not any(o[1] < f[1] < o[1] + o[2] for o in outer):
            outer.append(f)
    return outer


def layer_rule_problems():
    """Each core layer's includes against the layers its library links (core/CMakeLists.txt)."""
    cmake = (ROOT / "core/CMakeLists.txt").read_text()
    deps = {}
    for m in re.finditer(r"headroom_layer\((\w+)\s.*?DEPENDS([^)]*)\)", cmake, re.S):
        deps[m.group(1)] = [d[len("headroom_"):] for d in m.group(2).split() if d.startswith("headroom_")]

    def below(layer, seen=None):
        seen = set() if seen is None else seen
        for d in deps.get(layer, []):
            if d not in seen:
                seen.add(d)
                below(d, seen)
        return seen

    header_layer = {h.name: h.parent.parent.parent.name for h in (ROOT / "core").glob("*/include/headroom/*.h")}
    problems = []
    for layer in deps:
        visible = below(layer) | {layer}
        for f in sorted((ROOT / "core" / layer).rglob("*")):
            if f.suffix not in (".cpp", ".h"):
                continue
            for k, line in enumerate(f.read_text(errors="replace").split("\n")):
                m = re.match(r'#include "headroom/(\w+\.h)"', line)
                if m and m.group(1) in header_layer and header_layer[m.group(1)] not in visible:
                    problems.append(f"{f.relative_to(ROOT).as_posix()}:{k + 1}: includes headroom/{m.group(1)} of the "
                                    f"{header_layer[m.group(1)]} layer, above {layer}")
    if len(deps) < 8:
        problems.append("core/CMakeLists.txt: expected the eight layers as headroom_layer(...) calls")
    return problems


def main():
    allow = json.loads((ROOT / "scripts/structure-allow.json").read_text())
    allowed = {(e["rule"], e["path"], e.get("function", "")): e for e in allow["allow"]}
    used, problems = set(), layer_rule_problems()

    def check(rule, path, function, what):
        key = (rule, path, function)
        if key in allowed:
            used.add(key)
        else:
            problems.append(f"{path}: {what}")

    # Each mechanism is explained once, as a named note in docs/estimator.md, and cited by name.
    notes_doc = (ROOT / "docs/estimator.md").read_text()
    notes = set(re.findall(r"\*\*Note \[([^\]]+)\]\.\*\*", notes_doc))
    for p in sources():
        rel = p.relative_to(ROOT).as_posix()
        text = p.read_text(errors="replace")
        for k, line in enumerate(text.split("\n")):
            for cited in re.findall(r"Note \[([^\]]+)\]", line):
                if cited not in notes:
                    check("note-citation", rel, "", f"line {k + 1} cites Note [{cited}], which docs/estimator.md "
                          "does not have (a note is a paragraph opening with **Note [Name].**)")
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if lines > FILE_LINES:
            check("file-lines", rel, "", f"{lines} lines (the limit is {FILE_LINES}: split it by job)")
        funcs = python_functions(text) if p.suffix == ".py" else cpp_functions(text)
        for name, first, length in funcs:
            if length > FUNCTION_LINES:
                check("function-lines", rel, name,
                      f"{name} (line {first}) is {length} lines (the limit is {FUNCTION_LINES})")
        if p.suffix == ".py":
            continue
        code = strip_cpp(text)
        if not rel.startswith("core/model/families/"):
            raw = text.split("\n")
            for k, line in enumerate(code.split("\n")):
                if MODEL_TYPE_TEST.search(raw[k]) and "modelType" in line:
                    check("model-type-test", rel, "", f"line {k + 1} tests a model_type by name: "
                          "give the family a trait (core/model/families/) and ask that")
        if rel.startswith("core/sim/") and not rel.startswith(("core/sim/parallel/", "core/sim/include/")):
            hits = sum(1 for line in code.split("\n") if PARALLEL.search(line))
            if hits:
                check("parallel-outside-strategy", rel, "",
                      f"{hits} lines of parallelism outside core/sim/parallel/")

    for key, e in allowed.items():
        if key not in used:
            problems.append(f"scripts/structure-allow.json: the entry for {e['path']} {e.get('function', '')} "
                            f"({e['rule']}) is no longer needed: remove it")
    for p in problems:
        print(p)
    print(f"{len(problems)} problems; {len(used)} allowed exceptions, each with its reason in "
          "scripts/structure-allow.json")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
