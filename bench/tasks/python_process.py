#!/usr/bin/env python3
"""Pure-Python CPU-bound tasks: in-process (the tasks share the interpreter lock) beside
`@gpupool.remote(process=True)` (worker processes of this node, one per core at most), in the
same run, the in-process figure being the baseline.

Run with the interpreter the package was built for: PYTHONPATH=build/python /usr/bin/python3
bench/tasks/python_process.py [--tasks N] [--work N] [--rounds N] [--json]. Each task sums N
squares modulo 7 in a Python loop (about 20 ms at the default). The workers are started by a
warm-up before timing; rounds alternate the two ways and the best round of each counts.
"""
import argparse
import json
import os
import time

import gpupool


def burn(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


in_process = gpupool.remote(burn)
in_workers = gpupool.remote(process=True)(burn)


def rate(f, tasks, work):
    t0 = time.perf_counter()
    gpupool.get([f.submit(work) for _ in range(tasks)])
    return tasks / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=100)
    p.add_argument("--work", type=int, default=300000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    gpupool.init()
    cores = len(os.sched_getaffinity(0))
    gpupool.get([in_workers.submit(10) for _ in range(4 * cores)])   # start the workers
    gpupool.get([in_process.submit(10) for _ in range(4 * cores)])
    base, ours = 0.0, 0.0
    for _ in range(a.rounds):
        base = max(base, rate(in_process, a.tasks, a.work))
        ours = max(ours, rate(in_workers, a.tasks, a.work))
    gpupool.shutdown()
    if a.json:
        print(json.dumps({"cores": cores, "tasks": a.tasks, "work": a.work,
                          "in_process_tasks_per_s": base, "process_tasks_per_s": ours, "ratio": ours / base}))
        return
    print("pure-Python CPU-bound tasks (%d per round, %d squares each, best of %d rounds), %d cores"
          % (a.tasks, a.work, a.rounds, cores))
    print("%-34s %12s   %s" % ("way", "tasks/s", "vs in-process"))
    print("%-34s %12.1f   %s" % ("in-process (one interpreter lock)", base, "1.00x (baseline)"))
    print("%-34s %12.1f   %.2fx" % ("process=True (worker processes)", ours, ours / base))


if __name__ == "__main__":
    main()
