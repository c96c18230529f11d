"""A hyper-parameter sweep over a shared pool: every trial is a one-GPU task, and the pool places
them wherever it has GPUs (trials on other nodes run in workers their agents start; this file's
functions travel there by cloudpickle).

    GPUPOOL_ADDRESS=HOST:PORT GPUPOOL_TOKEN=... GPUPOOL_NODE=node-0 python3 examples/python/sweep.py

Without GPUPOOL_ADDRESS it runs on an embedded simulated pool. The model is a straight line fitted
by gradient descent to fixed noisy data (the same on every node, so every trial is reproducible);
the sleep stands for the GPU work of a real trial.
"""
import math
import random
import time

import gpupool


@gpupool.remote(gpus=1)
def trial(learning_rate, steps):
    rng = random.Random(7)
    data = [(x / 50, 3 * x / 50 + 2 + rng.gauss(0, 0.1)) for x in range(100)]
    w = b = 0.0
    for _ in range(steps):
        gw = sum(2 * (w * x + b - y) * x for x, y in data) / len(data)
        gb = sum(2 * (w * x + b - y) for x, y in data) / len(data)
        w, b = w - learning_rate * gw, b - learning_rate * gb
    loss = sum((w * x + b - y) ** 2 for x, y in data) / len(data)
    time.sleep(0.3)
    return {"learning_rate": learning_rate, "steps": steps, "w": w, "b": b,
            "loss": loss if math.isfinite(loss) else math.inf, "node": gpupool.context().slots[0]["node"]}


def main():
    grid = [(lr, steps) for lr in (0.001, 0.01, 0.1, 0.5) for steps in (50, 200)]
    start = time.monotonic()
    results = gpupool.get([trial.submit(lr, steps) for lr, steps in grid])
    print("%-14s %6s %10s  %s" % ("learning rate", "steps", "loss", "node"))
    for r in results:
        print("%-14g %6d %10.4g  %s" % (r["learning_rate"], r["steps"], r["loss"], r["node"]))
    best = min(results, key=lambda r: r["loss"])
    print("best: learning rate %g, %d steps: y = %.2f x + %.2f (loss %.5f)"
          % (best["learning_rate"], best["steps"], best["w"], best["b"], best["loss"]))
    print("%d trials on %s in %.1f s" % (len(results), ", ".join(sorted({r["node"] for r in results})),
                                          time.monotonic() - start))


if __name__ == "__main__":
    main()
