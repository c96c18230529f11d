#!/usr/bin/env python3
"""Checks every #include of the project against the allowed layer edges in docs/layers.txt.

  scripts/check_layering.py [REPO_ROOT]

A file's layer is its top-level folder, or runtime/<folder> for files under runtime/. An include
("..." or <...>) is the project's when its first path component is one of the layers' top-level
folders, or "gpupool/" (the public headers, runtime/include). Every top-level folder that holds
sources (build folders and hidden ones aside) must have a rule, so a new folder is never
silently unchecked. Generated headers (runtime/rpc/*.capnp.h) count
by their path like any other. Exits 1 with one line per offending include (file:line: what, why),
or when the allowed edges form a cycle or a layer the files live in has no rule.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+["<]([^">]+)[">]')
SOURCE_SUFFIXES = ('.h', '.hpp', '.cc', '.cpp', '.cu', '.cuh')


def layer_of(path):
    parts = path.split('/')
    if parts[0] == 'runtime' and len(parts) > 2:
        return 'runtime/' + parts[1]
    return parts[0]


def read_rules(path):
    rules = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            if ':' not in line:
                sys.exit(f'{path}:{n}: expected "layer: allowed layers", got {line!r}')
            name, allowed = line.split(':', 1)
            rules[name.strip()] = set(allowed.split())
    return rules


def find_cycle(rules):
    """A cycle among the allowed edges, as a list of layers, or None."""
    state = {}

    def visit(node, stack):
        state[node] = 'open'
        for nxt in sorted(rules.get(node, ())):
            if nxt == '*' or nxt == node:
                continue
            if state.get(nxt) == 'open':
                return stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt]
            if nxt not in state:
                found = visit(nxt, stack + [nxt])
                if found:
                    return found
        state[node] = 'done'
        return None

    for node in sorted(rules):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    rules = read_rules(os.path.join(root, 'docs', 'layers.txt'))
    problems = []
    unknown = [a for allowed in rules.values() for a in allowed if a != '*' and a not in rules]
    for name in sorted(set(unknown)):
        problems.append(f'docs/layers.txt: "{name}" is allowed somewhere but has no rule of its own')
    cycle = find_cycle(rules)
    if cycle:
        problems.append('docs/layers.txt: the allowed edges form a cycle: ' + ' -> '.join(cycle))
    top_folders = {name.split('/')[0] for name in rules}
    for entry in sorted(os.listdir(root)):
        folder = os.path.join(root, entry)
        if entry in top_folders or entry.startswith(('.', 'build')) or not os.path.isdir(folder):
            continue
        if any(f.endswith(SOURCE_SUFFIXES) for _, _, files in os.walk(folder) for f in files):
            problems.append(f'{entry}/: holds sources but has no rule in docs/layers.txt')
    checked = 0
    for top in sorted(top_folders):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if not d.startswith('.') and d != 'build']
            for filename in sorted(filenames):
                if not filename.endswith(SOURCE_SUFFIXES):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, filename), root)
                mine = layer_of(rel)
                if mine not in rules:
                    problems.append(f'{rel}: its layer "{mine}" has no rule in docs/layers.txt')
                    continue
                allowed = rules[mine]
                checked += 1
                with open(os.path.join(root, rel), errors='replace') as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        if target.startswith('gpupool/'):
                            theirs = 'runtime/include'
                        elif target.split('/')[0] in top_folders:
                            theirs = layer_of(target)
                        else:
                            continue  # a library's header (absl/, capnp/, ...)
                        if theirs == mine or '*' in allowed or theirs in allowed:
                            continue
                        problems.append(f'{rel}:{n}: includes "{target}": layer {mine} may not use {theirs} '
                                        f'(allowed: {", ".join(sorted(allowed)) or "none"})')
    for p in problems:
        print(p)
    if problems:
        print(f'layering: {len(problems)} problem(s) in {checked} files')
        return 1
    print(f'layering: {checked} files follow docs/layers.txt')
    return 0


if __name__ == '__main__':
    sys.exit(main())
