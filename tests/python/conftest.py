"""Fixtures shared by the Python tests."""
import os
import subprocess
import time

import pytest

CLI = os.environ.get("GPUPOOL_CLI", "")
TEAM_TOKEN = "team-secret-0123456789"
AGENT_TOKEN = "agent-secret-0123456789"


def _two_node_pool(tmp_path, head_args=()):
    """A `gpupool head` (with `head_args` too) over two nodes of two simulated GPUs and an agent
    per node, as real processes on loopback; yields the head's port once both agents have
    registered. Teams' token: TEAM_TOKEN (team "default")."""
    if not CLI:
        pytest.skip("GPUPOOL_CLI is not set (run through CTest)")
    (tmp_path / "tokens").write_text(f"default: {TEAM_TOKEN}\nagents: {AGENT_TOKEN}\n")
    (tmp_path / "agent.token").write_text(AGENT_TOKEN + "\n")
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("head", "node-0", "node-1")}
    procs = [subprocess.Popen([CLI, "head", "--simulate", "2xH100-80GB", "--node-count", "2", "--tokens",
                               str(tmp_path / "tokens"), "--listen", "127.0.0.1:0", "--port-file",
                               str(tmp_path / "port"), *head_args], stdout=logs["head"], stderr=subprocess.STDOUT)]
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


@pytest.fixture
def two_node_pool(tmp_path):
    """The two-node pool (_two_node_pool), its head without a journal."""
    yield from _two_node_pool(tmp_path)


@pytest.fixture
def two_node_pool_with_journal(tmp_path):
    """The two-node pool, its head with a journal and a reclaim window of 30 s: a job whose
    connection drops may come back and take back what it held."""
    yield from _two_node_pool(tmp_path, ("--journal", str(tmp_path / "head.db"), "--reclaim-window-s", "30"))
