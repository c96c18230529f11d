"""Fixtures shared by the Python tests."""
import os
import subprocess
import time

import pytest

CLI = os.environ.get("GPUPOOL_CLI", "")
TEAM_TOKEN = "team-secret-0123456789"
AGENT_TOKEN = "agent-secret-0123456789"


@pytest.fixture
def two_node_pool(tmp_path):
    """A `gpupool head` over two nodes of two simulated GPUs and an agent per node, as real
    processes on loopback; yields the head's port once both agents have registered. Teams' token:
    TEAM_TOKEN (team "default")."""
    if not CLI:
        pytest.skip("GPUPOOL_CLI is not set (run through CTest)")
    (tmp_path / "tokens").write_text(f"default: {TEAM_TOKEN}\nagents: {AGENT_TOKEN}\n")
    (tmp_path / "agent.token").write_text(AGENT_TOKEN + "\n")
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("head", "node-0", "node-1")}
    procs = [subprocess.Popen([CLI, "head", "--simulate", "2xH100-80GB", "--node-count", "2", "--tokens",
                               str(tmp_path / "tokens"), "--listen", "127.0.0.1:0", "--port-file",
                               str(tmp_path / "port")], stdout=logs["head"], stderr=subprocess.STDOUT)]
    try:
        for _ in range(100):
            if (tmp_path / "port").exists() and (tmp_path / "port").read_text().strip():
                break
            time.sleep(0.05)
        port = (tmp_path / "port").read_text().strip()
        for node in ("node-0", "node-1"):
            # This machine runs everything as root, so the agents are told workers may be root too.
            procs.append(subprocess.Popen([CLI, "agent", "--head", f"127.0.0.1:{port}", "--node", node, "--simulate",
                                           "2xH100-80GB", "--token-file", str(tmp_path / "agent.token"),
                                           "--allow-root-workers"], stdout=logs[node], stderr=subprocess.STDOUT))
        for _ in range(100):
            if all("registered" in (tmp_path / f"{n}.log").read_text() for n in ("node-0", "node-1")):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the agents did not register: " + (tmp_path / "head.log").read_text())
        yield port
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for f in logs.values():
            f.close()
