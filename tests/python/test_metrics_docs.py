"""The Grafana dashboard and alert rules in docs/ name only metrics a real head serves: a
`gpupool head --http-listen` is scraped with the operators' token and every gpupool_* name in
docs/grafana-dashboard.json and docs/prometheus-alerts.yml must be one of its families."""
import os
import re
import subprocess
import time
import urllib.request

import pytest

CLI = os.environ.get("GPUPOOL_CLI", "")
SOURCE = os.environ.get("GPUPOOL_SOURCE_DIR", "")


def test_the_docs_name_only_metrics_the_head_serves(tmp_path):
    if not CLI or not SOURCE:
        pytest.skip("GPUPOOL_CLI or GPUPOOL_SOURCE_DIR is not set (run through CTest)")
    (tmp_path / "tokens").write_text("operators: ops-token-0123456789\n")
    head = subprocess.Popen([CLI, "head", "--simulate", "1xL4", "--tokens", str(tmp_path / "tokens"), "--listen",
                             "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--http-port-file", str(tmp_path / "http")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            if (tmp_path / "http").exists() and (tmp_path / "http").read_text().strip():
                break
            time.sleep(0.05)
        port = (tmp_path / "http").read_text().strip()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": "Bearer ops-token-0123456789"})
        text = urllib.request.urlopen(req, timeout=10).read().decode()
    finally:
        head.kill()
        head.wait()
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert "gpupool_node_up" in families
    for doc in ("docs/grafana-dashboard.json", "docs/prometheus-alerts.yml"):
        named = set(re.findall(r"gpupool_[a-z_]+", open(os.path.join(SOURCE, doc)).read()))
        named = {re.sub(r"_(bucket|sum|count)$", "", n) for n in named} - {"gpupool_pool"}
        assert named and named <= families, f"{doc} names {sorted(named - families)}, which the head does not serve"
