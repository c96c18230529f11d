#!/usr/bin/env python3
"""Clang's thread-safety analysis over the project's concurrent code, without a second build.

  scripts/check_thread_safety.py BUILD_DIR [-j N]

Runs `clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety` (every other warning off: GCC
builds the project and owns those) over the entries of BUILD_DIR/compile_commands.json under
runtime/, transport/ and checkpoint/ (CUDA sources left out: nvcc compiles them). Each translation
unit's diagnostics are printed as clang gives them; exits 1 when any unit has one, 2 when clang++
is missing or the build has no compile_commands.json.
"""
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys

FOLDERS = ('runtime', 'transport', 'checkpoint')


def clang_command(entry, clang):
    args = entry['arguments'] if 'arguments' in entry else shlex.split(entry['command'])
    out = [clang]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == '-o':
            skip = True
            continue
        if a == '-c' or a.startswith('-fno-fat-lto') or a.startswith('-flto'):
            continue
        out.append(a)
    return out + ['-fsyntax-only', '-Wno-everything', '-Wthread-safety', '-Werror=thread-safety']


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = os.path.abspath(sys.argv[1])
    jobs = int(sys.argv[sys.argv.index('-j') + 1]) if '-j' in sys.argv else (os.cpu_count() or 2)
    clang = shutil.which('clang++')
    if clang is None:
        print('thread-safety: clang++ is not installed (scripts/install-deps.sh installs it)')
        return 2
    path = os.path.join(build, 'compile_commands.json')
    if not os.path.exists(path):
        print(f'thread-safety: {path} is missing (configure with CMAKE_EXPORT_COMPILE_COMMANDS)')
        return 2
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
    entries = []
    for e in json.load(open(path)):
        rel = os.path.relpath(e['file'], root)
        if rel.split(os.sep)[0] in FOLDERS and not rel.endswith('.cu'):
            entries.append((rel, e))
    entries.sort()

    def check(item):
        rel, e = item
        r = subprocess.run(clang_command(e, clang), cwd=e['directory'], capture_output=True, text=True)
        return rel, r.returncode, (r.stdout + r.stderr).strip()

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for rel, code, text in pool.map(check, entries):
            if code != 0 or text:
                failed += 1
                print(f'--- {rel}\n{text}')
    if failed:
        print(f'thread-safety: {failed} of {len(entries)} translation units have findings')
        return 1
    print(f'thread-safety: {len(entries)} translation units, no findings')
    return 0


if __name__ == '__main__':
    sys.exit(main())
