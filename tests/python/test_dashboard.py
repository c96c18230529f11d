"""The head's dashboard in a real browser: `gpupool head --http-listen` with an agent and a Python
job holding a lease, headless Chromium driven by Selenium enters a token, and what the page shows
must match `gpupool queue --json`, `usage --json` and `status --json`. Skipped, saying why, where
Chromium, its driver or Selenium are missing (install: apt-get install -y chromium
chromium-driver python3-selenium; scripts/install-browser-test.sh does it)."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

CLI = os.environ.get("GPUPOOL_CLI", "")
OPS_TOKEN = "ops-token-0123456789"
TEAM_TOKEN = "vision-token-0123456789"
AGENT_TOKEN = "agent-token-0123456789"

HOLDER = """
import time
import gpupool

@gpupool.remote(gpus=0.5)
def hold():
    time.sleep(60)
    return 1

ref = hold.submit()
print("submitted", flush=True)
gpupool.get(ref)
"""


def cli(*args):
    return subprocess.run([CLI] + list(args), capture_output=True, text=True, timeout=30)


def browser():
    try:
        from selenium import webdriver
    except ImportError:
        pytest.skip("python3-selenium is not installed (apt-get install -y chromium chromium-driver python3-selenium)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.fixture
def pool(tmp_path):
    if not CLI:
        pytest.skip("GPUPOOL_CLI is not set (run through CTest)")
    (tmp_path / "tokens").write_text(f"vision: {TEAM_TOKEN}\noperators: {OPS_TOKEN}\nagents: {AGENT_TOKEN}\n")
    (tmp_path / "agent.token").write_text(AGENT_TOKEN + "\n")
    log = open(tmp_path / "daemons.log", "w")
    procs = []

    def start(args, env=None):
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        procs.append(p)
        return p

    start([CLI, "head", "--simulate", "2xH100-80GB", "--tokens", str(tmp_path / "tokens"), "--listen", "127.0.0.1:0",
           "--port-file", str(tmp_path / "port"), "--http-listen", "127.0.0.1:0", "--http-port-file",
           str(tmp_path / "http"), "--journal", str(tmp_path / "head.db"), "--history-interval-s", "0.2"])
    for _ in range(100):
        if (tmp_path / "http").exists() and (tmp_path / "http").read_text().strip():
            break
        time.sleep(0.05)
    port, http = (tmp_path / "port").read_text().strip(), (tmp_path / "http").read_text().strip()
    start([CLI, "agent", "--head", f"127.0.0.1:{port}", "--node", "node-0", "--simulate", "2xH100-80GB",
           "--heartbeat-ms", "100", "--token-file", str(tmp_path / "agent.token")])
    env = dict(os.environ, GPUPOOL_ADDRESS=f"127.0.0.1:{port}", GPUPOOL_TOKEN=TEAM_TOKEN, GPUPOOL_NODE="node-0",
               GPUPOOL_TEAM="vision")
    start([sys.executable, "-c", HOLDER], env=env)
    for _ in range(300):
        q = cli("queue", "--json", "--pool", f"127.0.0.1:{port}", "--token", OPS_TOKEN)
        if q.returncode == 0 and json.loads(q.stdout)["leases"]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the job got no lease: " + (tmp_path / "daemons.log").read_text())
    yield port, http
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    log.close()


def test_the_dashboard_shows_what_the_cli_shows(pool, tmp_path):
    port, http = pool
    driver = browser()
    try:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
        started = time.monotonic()
        driver.get(f"http://127.0.0.1:{http}/")
        assert driver.find_element(By.ID, "board").get_attribute("hidden") is not None, "no data before a token"
        driver.find_element(By.ID, "token").send_keys(OPS_TOKEN)
        driver.find_element(By.ID, "save").click()
        WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "board").is_displayed())
        shown_after_s = time.monotonic() - started
        paint = driver.execute_script(
            "const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : null;")
        print(f"dashboard: first contentful paint {paint} ms; board shown {shown_after_s:.2f} s after load")
        assert driver.execute_script("return sessionStorage.getItem('gpupool-token')") == OPS_TOKEN
        assert driver.find_element(By.ID, "token").get_attribute("value") == "", "the token is not left in the form"

        queue = json.loads(cli("queue", "--json", "--pool", f"127.0.0.1:{port}", "--token", OPS_TOKEN).stdout)
        rows = driver.find_elements(By.CSS_SELECTOR, "#queue tbody tr")
        shown = sorted(r.find_elements(By.TAG_NAME, "td")[1].text for r in rows
                       if r.find_elements(By.TAG_NAME, "td")[0].text == "running")
        assert shown == sorted(l["lease"] for l in queue["leases"])

        status = json.loads(cli("status", "--json", "--pool", f"127.0.0.1:{port}", "--token", OPS_TOKEN).stdout)
        gpus = driver.find_elements(By.CSS_SELECTOR, "#health .gpu")
        assert [g.get_attribute("data-health") for g in gpus] == [g["health"] for n in status["nodes"] for g in n["gpus"]]

        usage = json.loads(cli("usage", "--json", "--since", "-1d", "--pool", f"127.0.0.1:{port}", "--token",
                               OPS_TOKEN).stdout)
        cells = [r.find_elements(By.TAG_NAME, "td") for r in driver.find_elements(By.CSS_SELECTOR, "#usage tbody tr")]
        teams = {c[0].text: float(c[1].text) for c in cells if not c[0].text.startswith("(")}
        assert set(teams) == {r["group"] for r in usage["rows"]} == {"vision"}
        # The page shows GPU-hours to 3 decimals; the CLI asked a moment later (the lease ran on).
        assert abs(teams["vision"] - usage["rows"][0]["gpu_hours"]) <= 0.0015
        assert usage["rows"][0]["leases"] >= 1

        # The history the head sampled (every 0.2 s here) is drawn: the pool's line and vision's.
        WebDriverWait(driver, 20).until(
            lambda d: {l.get_attribute("data-scope") for l in d.find_elements(By.CSS_SELECTOR, "#history polyline")}
            >= {"pool", "(capacity)", "vision"})

        # Utilisation by GPU model from the same history: the one model's newest point is what the
        # CLI says is allocated of its schedulable GPUs now (the job holds half a GPU throughout).
        WebDriverWait(driver, 20).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, '#model-history polyline[data-model="H100-80GB"]'))
        status = json.loads(cli("status", "--json", "--pool", f"127.0.0.1:{port}", "--token", OPS_TOKEN).stdout)
        queue = json.loads(cli("queue", "--json", "--pool", f"127.0.0.1:{port}", "--token", OPS_TOKEN).stdout)
        schedulable = sum(1 for n in status["nodes"] for g in n["gpus"]
                          if g["model"] == "H100-80GB" and g["health"] in ("healthy", "degraded"))
        expected = 100 * sum(l["gpu_share"] for l in queue["leases"]) / schedulable
        WebDriverWait(driver, 20).until(lambda d: float(d.find_element(
            By.CSS_SELECTOR, '#model-history polyline[data-model="H100-80GB"]').get_attribute("data-last")) == expected)
        assert expected == 25.0
        assert "H100-80GB 25.0% now" in driver.find_element(By.ID, "model-legend").text

        # The savings panel against `gpupool savings --json` over the same 7 days.
        savings = json.loads(cli("savings", "--json", "--since", "-7d", "--pool", f"127.0.0.1:{port}", "--token",
                                 OPS_TOKEN).stdout)
        cells = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                 for r in driver.find_elements(By.CSS_SELECTOR, "#savings tbody tr")]
        assert [(c[0], c[1], float(c[3]), float(c[4]), c[5]) for c in cells] == [
            (r["team"], r["model"], r["peak_gpus"], r["p95_gpus"], f'{r["dedicated_cost_peak_cents"] / 100:.2f}')
            for r in savings["teams"]], (cells, savings)
        assert savings["teams"][0]["peak_gpus"] == 0.5
        summary = driver.find_element(By.ID, "savings-summary")
        assert int(summary.get_attribute("data-pooled-cents")) == savings["pooled"]["cost_cents"]
        assert int(summary.get_attribute("data-peak-cents")) == savings["dedicated_peak"]["cost_cents"]
        assert f'pooled: {savings["pooled"]["gpus"]:g} GPUs, {savings["pooled"]["cost_cents"] / 100:.2f} USD' in summary.text

        # A team's token: its own rows only, and the page says whose view it is.
        driver.find_element(By.ID, "forget").click()
        driver.find_element(By.ID, "token").send_keys(TEAM_TOKEN)
        driver.find_element(By.ID, "save").click()
        WebDriverWait(driver, 20).until(lambda d: "team vision" in d.find_element(By.ID, "viewer").text)
        shot = os.environ.get("GPUPOOL_DASHBOARD_SCREENSHOT", str(tmp_path / "dashboard.png"))
        driver.save_screenshot(shot)
    finally:
        driver.quit()
