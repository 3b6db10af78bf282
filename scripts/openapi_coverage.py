#!/usr/bin/env python3
"""Checks that docs/openapi.yaml covers the server: every ProblemCode case is in the spec's
`ProblemCode` enum (and nothing else is), every route registered in Sources/CofferServer is a
path and method of the spec (and every documented operation is a route), every code a response
names is a ProblemCode, and every error response is `application/problem+json`.

Routes are read from the source: `<x>.get("/path")` (also put, post, delete, head, patch; or
`.get {` for the group's own path) in each controller's `func add…(to:)`, prefixed with the
group that Application+build.swift passes to that function (`router.group("/v1/admin")`, a
`let audit = router.group(…)`, `router`), and the routes Application+build.swift registers
itself (`router.group("/v1/whoami")….get {`). A controller registration whose prefix cannot be
worked out is an error, so a new way of adding routes makes this check fail instead of passing
silently.

Usage: scripts/openapi_coverage.py [--root DIR] [--spec FILE]   (needs PyYAML; the
.build-venv that .ci/api-contract sets up has it). Exit 0 when covered, 1 otherwise.
"""
import argparse
import os
import re
import sys

import yaml

METHODS = ("get", "put", "post", "delete", "head", "patch")


def problem_codes(path):
    text = open(path, encoding="utf-8").read()
    start = text.index("public enum ProblemCode")
    end = text.index("public var status", start)
    codes = []
    for line in text[start:end].splitlines():
        line = line.split("//", 1)[0].strip()
        if line.startswith("case "):
            codes += [c.strip() for c in line[5:].split(",") if c.strip()]
    for c in codes:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", c):
            raise SystemExit(f"openapi-coverage: cannot read ProblemCode case {c!r} in {path}")
    return codes


def group_prefixes(build_text):
    """`let NAME = router.group("PREFIX")…` → {NAME: PREFIX}; `router` itself is ""."""
    names = {"router": ""}
    for m in re.finditer(r'let\s+(\w+)\s*=\s*router\.group\(\s*(?:"([^"]*)")?\s*\)', build_text):
        names[m.group(1)] = m.group(2) or ""
    return names


def argument_prefix(arg, groups):
    arg = arg.strip()
    m = re.match(r'router\.group\(\s*(?:"([^"]*)")?\s*\)', arg)
    if m:
        return m.group(1) or ""
    m = re.match(r"(\w+)\b", arg)
    if m and m.group(1) in groups:
        return groups[m.group(1)]
    return None


def registrations(build_text):
    """{(ControllerType, funcName): prefix} from Application+build.swift."""
    groups = group_prefixes(build_text)
    variables = {m.group(1): m.group(2) for m in re.finditer(r"let\s+(\w+)\s*=\s*(\w+Controller)\s*\(", build_text)}
    found = {}
    # `Type(…).func(to: ARG` — the initializer's arguments may span lines and hold parentheses.
    for m in re.finditer(r"\b(\w+Controller)\s*\(", build_text):
        depth, i = 1, m.end()
        while depth and i < len(build_text):
            depth += {"(": 1, ")": -1}.get(build_text[i], 0)
            i += 1
        call = re.match(r"\s*\.\s*(\w+)\s*\(\s*to\s*:\s*", build_text[i:])
        if call:
            found[(m.group(1), call.group(1))] = argument_prefix(build_text[i + call.end():], groups)
    for m in re.finditer(r"\b(\w+)\s*\.\s*(\w+)\s*\(\s*to\s*:\s*", build_text):
        if m.group(1) in variables:
            found[(variables[m.group(1)], m.group(2))] = argument_prefix(build_text[m.end():], groups)
    return found


def controller_routes(path):
    """{(ControllerType, funcName): [(method, path)]} for `func NAME(to…)` bodies in `path`."""
    text = open(path, encoding="utf-8").read()
    out = {}
    types = list(re.finditer(r"^(?:public\s+|private\s+|fileprivate\s+)?struct\s+(\w+)", text, re.M))
    funcs = list(re.finditer(r"\bfunc\s+(\w+)\s*(?:<[^>]*>)?\s*\(\s*to\b", text))
    for n, f in enumerate(funcs):
        owner = [t.group(1) for t in types if t.start() < f.start()]
        body_end = funcs[n + 1].start() if n + 1 < len(funcs) else len(text)
        body = text[f.end():body_end]
        pattern = r'\.(%s)\s*(?:\(\s*"(/[^"]*)"|\(\s*\)|(?=\{))' % "|".join(METHODS)
        routes = [(m.group(1), m.group(2) or "") for m in re.finditer(pattern, body)]
        if routes:
            out[(owner[-1] if owner else "?", f.group(1))] = routes
    return out


def chain_root(text, end):
    """The receiver chain ending just before `end` (`router.group("/p").add(…)`): its root
    identifier and the text of the chain, read backwards over balanced parentheses."""
    i = end
    while True:
        while i > 0 and text[i - 1].isspace():
            i -= 1
        if i > 0 and text[i - 1] == ")":
            depth = 0
            while i > 0:
                i -= 1
                depth += {")": 1, "(": -1}.get(text[i], 0)
                if depth == 0:
                    break
        j = i
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] == "_"):
            j -= 1
        if j > 0 and text[j - 1] == ".":
            i = j - 1
            continue
        return text[j:i], text[j:end]


def direct_routes(build_text):
    """Routes registered in Application+build.swift itself: `router.get("/p")`,
    `router.group("/p")….get {` (the group's own path), `audit.get("/p")`."""
    groups = group_prefixes(build_text)
    routes, problems = [], []
    for m in re.finditer(r"\.(%s)\s*(?:\(\s*\)|\(\s*\"(/[^\"]*)\"|(?=\{))" % "|".join(METHODS), build_text):
        root, chain = chain_root(build_text, m.start())
        if root not in groups:
            continue
        prefix = groups[root]
        g = re.match(r'router\s*\.\s*group\(\s*(?:"([^"]*)")?\s*\)', chain)
        if root == "router" and g:
            prefix = g.group(1) or ""
        elif root == "router" and ".group(" in chain:
            problems.append(f"Application+build.swift: cannot read the group of {chain!r}")
            continue
        routes.append((m.group(1), prefix + (m.group(2) or "")))
    return routes, problems


def spec_path(prefix, route):
    path = prefix + route
    return re.sub(r":(\w+)", r"{\1}", path)


def walk_codes(node, where, out):
    """Every `code` const/enum inside response schemas."""
    if isinstance(node, dict):
        code = node.get("properties", {}).get("code") if isinstance(node.get("properties"), dict) else None
        if isinstance(code, dict):
            for v in code.get("enum", []) + ([code["const"]] if "const" in code else []):
                out.append((where, v))
        for k, v in node.items():
            walk_codes(v, where, out)
    elif isinstance(node, list):
        for v in node:
            walk_codes(v, where, out)


def resolve(spec, node):
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        target = spec
        for part in ref[2:].split("/"):
            target = target[part]
        node = target
    return node


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--root", default=root)
    parser.add_argument("--spec", default=None)
    args = parser.parse_args()
    spec_file = args.spec or os.path.join(args.root, "docs", "openapi.yaml")
    spec = yaml.safe_load(open(spec_file, encoding="utf-8"))
    problems = []

    if not str(spec.get("openapi", "")).startswith("3.1"):
        problems.append(f"the spec is OpenAPI {spec.get('openapi')!r}, not 3.1")

    codes = problem_codes(os.path.join(args.root, "Sources", "CofferCore", "ProblemCode.swift"))
    documented = spec["components"]["schemas"]["ProblemCode"]["enum"]
    for c in codes:
        if c not in documented:
            problems.append(f"ProblemCode.{c} is not in components.schemas.ProblemCode.enum")
    for c in documented:
        if c not in codes:
            problems.append(f"components.schemas.ProblemCode.enum lists {c!r}, which is no ProblemCode case")

    server = os.path.join(args.root, "Sources", "CofferServer")
    build_text = open(os.path.join(server, "Application+build.swift"), encoding="utf-8").read()
    prefixes = registrations(build_text)
    routes = set()
    for name in sorted(os.listdir(server)):
        if not name.endswith(".swift"):
            continue
        for key, found in controller_routes(os.path.join(server, name)).items():
            if key not in prefixes or prefixes[key] is None:
                problems.append(f"{name}: {key[0]}.{key[1]}(to:) registers {found} but Application+build.swift does not say under which prefix")
                continue
            for method, route in found:
                routes.add((method, spec_path(prefixes[key], route)))
    direct, unreadable = direct_routes(build_text)
    problems += unreadable
    for method, route in direct:
        routes.add((method, spec_path("", route)))
    if not routes:
        problems.append("found no routes in Sources/CofferServer: the route reader needs updating")

    paths = spec.get("paths", {})
    operations = {(m, p) for p, item in paths.items() for m in item if m in METHODS}
    for method, path in sorted(routes):
        if (method, path) not in operations:
            problems.append(f"route {method.upper()} {path} is not in the spec")
    for method, path in sorted(operations - routes):
        problems.append(f"the spec documents {method.upper()} {path}, which no route serves")

    for path, item in paths.items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            label = f"{method.upper()} {path}"
            if "security" not in op:
                problems.append(f"{label}: no `security` (say `security: []` for none)")
            responses = op.get("responses", {})
            if not responses:
                problems.append(f"{label}: no responses")
            for status, response in responses.items():
                response = resolve(spec, response)
                if str(status)[0] in "45":
                    content = response.get("content", {})
                    if list(content) != ["application/problem+json"]:
                        problems.append(f"{label} {status}: an error must be application/problem+json only, not {list(content)}")
                    found = []
                    walk_codes(resolve(spec, content.get("application/problem+json", {}).get("schema", {})), label, found)
                    for ref in _refs(content):
                        walk_codes(resolve(spec, {"$ref": ref}), label, found)
                    if not found:
                        problems.append(f"{label} {status}: the problem schema names no code")
                    for _, code in found:
                        if code not in codes:
                            problems.append(f"{label} {status}: {code!r} is not a ProblemCode")

    if problems:
        for p in problems:
            print(f"openapi-coverage: {p}")
        print(f"openapi-coverage: FAILED ({len(problems)} problems)")
        return 1
    print(f"openapi-coverage: OK ({len(codes)} problem codes, {len(routes)} routes, {len(operations)} operations)")
    return 0


def _refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


if __name__ == "__main__":
    sys.exit(main())
