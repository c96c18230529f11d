"""The Grafana dashboard and alert rules in docs/ name only metrics a real head and agent serve: a
`gpupool head --http-listen` is scraped with the operators' token and a `gpupool agent
--http-listen` without one, and every gpupool_* and DCGM_* name in docs/grafana-dashboard.json and
docs/prometheus-alerts.yml must be one of their families."""
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
    (tmp_path / "tokens").write_text("operators: ops-token-0123456789\nagents: agent-token-0123456789\n")
    head = subprocess.Popen([CLI, "head", "--simulate", "1xL4", "--tokens", str(tmp_path / "tokens"), "--listen",
                             "127.0.0.1:0", "--port-file", str(tmp_path / "port"), "--http-listen", "127.0.0.1:0",
                             "--http-port-file", str(tmp_path / "http")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    procs = [head]

    def wait_for(name):
        for _ in range(200):
            if (tmp_path / name).exists() and (tmp_path / name).read_text().strip():
                return (tmp_path / name).read_text().strip()
            time.sleep(0.05)
        raise AssertionError(f"no {name} file: the daemon did not start")

    try:
        port = wait_for("http")
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": "Bearer ops-token-0123456789"})
        text = urllib.request.urlopen(req, timeout=10).read().decode()
        procs.append(subprocess.Popen([CLI, "agent", "--head", f"127.0.0.1:{wait_for('port')}", "--node", "node-0",
                                       "--simulate", "1xL4", "--token", "agent-token-0123456789", "--http-listen",
                                       "127.0.0.1:0", "--http-port-file", str(tmp_path / "agent-http")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        agent_port = wait_for("agent-http")
        agent_text = urllib.request.urlopen(f"http://127.0.0.1:{agent_port}/metrics", timeout=10).read().decode()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert "gpupool_node_up" in families
    agent_families = set(re.findall(r"^# TYPE (\S+) ", agent_text, re.M))
    assert "DCGM_FI_DEV_GPU_UTIL" in agent_families
    for doc in ("docs/grafana-dashboard.json", "docs/prometheus-alerts.yml"):
        named = set(re.findall(r"gpupool_[a-z_]+", open(os.path.join(SOURCE, doc)).read()))
        named = {re.sub(r"_(bucket|sum|count)$", "", n) for n in named} - {"gpupool_pool"}
        assert named and named <= families, f"{doc} names {sorted(named - families)}, which the head does not serve"
        dcgm = set(re.findall(r"DCGM_FI_[A-Z_]+", open(os.path.join(SOURCE, doc)).read()))
        assert dcgm and dcgm <= agent_families, f"{doc} names {sorted(dcgm - agent_families)}, which agents do not serve"
