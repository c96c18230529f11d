"""The dashboard's first paint in headless Chromium: a real `gpupool head --http-listen` over
10,000 simulated GPUs (1,250 nodes of 8, no agents: every GPU shows as lost, which costs the page
the same as healthy ones) beside the same head over 8 GPUs, measured in the same run. Per pool:
first contentful paint (the page itself, before a token) and the time from entering the operators'
token to the board drawn with the head's data (status, queue, usage, history, savings, and one
element per GPU in the health grid), the median of a few loads.

  python3 bench/metrics/dashboard_paint.py CLI [--json] [--loads N]

Prints "dashboard paint: unavailable (<reason>)" and exits 0 where Chromium, chromedriver or
Selenium are missing (scripts/install-browser-test.sh installs them)."""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

OPS = "ops-token-0123456789"


def unavailable(reason):
    print(f"dashboard paint: unavailable ({reason})")
    sys.exit(0)


def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("python3-selenium is not installed")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        unavailable("chromium and chromium-driver are not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options)


def start_head(cli, tmp, name, nodes):
    (tmp / "tokens").write_text(f"operators: {OPS}\n")
    port_file = tmp / f"{name}.http"
    head = subprocess.Popen([cli, "head", "--simulate", "8xH100-80GB", "--node-count", str(nodes), "--tokens",
                             str(tmp / "tokens"), "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                             "--http-port-file", str(port_file), "--journal", str(tmp / f"{name}.db")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    for _ in range(600):
        if port_file.exists() and port_file.read_text().strip():
            return head, port_file.read_text().strip()
        if head.poll() is not None:
            break
        time.sleep(0.05)
    head.kill()
    raise RuntimeError(f"the head over {nodes} nodes did not start")


def measure(driver, port, gpus, loads):
    """Median first contentful paint (ms) and median token-to-board time (ms) over `loads` loads."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    paints, boards = [], []
    for _ in range(loads):
        driver.get("about:blank")
        driver.get(f"http://127.0.0.1:{port}/")
        paints.append(driver.execute_script(
            "const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : null;"))
        driver.execute_script("sessionStorage.removeItem('gpupool-token')")
        driver.find_element(By.ID, "token").send_keys(OPS)
        started = time.monotonic()
        driver.find_element(By.ID, "save").click()
        WebDriverWait(driver, 120, poll_frequency=0.01).until(
            lambda d: d.find_element(By.ID, "board").is_displayed() and
            d.execute_script("return document.querySelectorAll('#health .gpu').length") == gpus)
        boards.append(1000 * (time.monotonic() - started))
        driver.execute_script("sessionStorage.removeItem('gpupool-token')")
    return statistics.median(p for p in paints if p is not None), statistics.median(boards)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: dashboard_paint.py CLI [--json] [--loads N]")
    cli, as_json = sys.argv[1], "--json" in sys.argv
    loads = int(sys.argv[sys.argv.index("--loads") + 1]) if "--loads" in sys.argv else 3
    driver = browser()
    heads = []
    try:
        with tempfile.TemporaryDirectory() as d:
            from pathlib import Path
            tmp = Path(d)
            small, small_port = start_head(cli, tmp, "small", 1)
            heads.append(small)
            big, big_port = start_head(cli, tmp, "big", 1250)
            heads.append(big)
            small_paint, small_board = measure(driver, small_port, 8, loads)
            big_paint, big_board = measure(driver, big_port, 10000, loads)
    finally:
        driver.quit()
        for h in heads:
            h.kill()
            h.wait()
    rows = [("dashboard_first_paint_10000_gpus", big_paint, "ms", "dashboard_first_paint_8_gpus", small_paint,
             f"headless Chromium, median of {loads} loads"),
            ("dashboard_board_shown_10000_gpus", big_board, "ms", "dashboard_board_shown_8_gpus", small_board,
             "token entered to every GPU drawn")]
    for m, v, u, r, rv, note in rows:
        if as_json:
            print(json.dumps({"bench": "metrics", "metric": m, "value": round(v, 2), "unit": u, "reference": r,
                              "reference_value": round(rv, 2)}))
        else:
            print("%-36s %14.2f %-8s  %-36s %14.2f %8.3f  %s" % (m, v, u, r, rv, v / rv if rv else 0, note))


if __name__ == "__main__":
    main()
