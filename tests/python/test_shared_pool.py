"""A shared pool as an organisation runs it: `gpupool head` (with its SQLite journal) and a
`gpupool agent` as real daemons, and Python jobs of a team that join it by address
(GPUPOOL_ADDRESS, GPUPOOL_TOKEN, GPUPOOL_NODE) in their own processes. The head is then killed
with SIGKILL and restarted: the usage ledger it acknowledged is still there, and a job that was
running through the restart reconnects, reclaims the leases the new head took back from its
journal (no task is interrupted), has its waiting requests admitted again and finishes."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

CLI = os.environ.get("GPUPOOL_CLI", "")
TEAM_TOKEN = "vision-token-0123456789"
AGENT_TOKEN = "agent-token-0123456789"

JOB = """
import gpupool

@gpupool.remote(gpus=0.5)
def where(x):
    return gpupool.context().slots[0]["node"], x * x

print(sorted(gpupool.get([where.submit(i) for i in range(8)])))
"""


def start(args, log):
    return subprocess.Popen([CLI] + args, stdout=log, stderr=subprocess.STDOUT)


def cli(*args):
    return subprocess.run([CLI] + list(args), capture_output=True, text=True, timeout=30)


@pytest.fixture
def head(tmp_path):
    if not CLI:
        pytest.skip("GPUPOOL_CLI is not set (run through CTest)")
    (tmp_path / "tokens").write_text(f"vision: {TEAM_TOKEN}\nagents: {AGENT_TOKEN}\n")
    (tmp_path / "agent.token").write_text(AGENT_TOKEN + "\n")
    procs = []
    log = open(tmp_path / "daemons.log", "w")

    def start_head(port="0"):
        port_file = tmp_path / "port"
        if port_file.exists():
            port_file.unlink()
        p = start(["head", "--simulate", "2xH100-80GB", "--node-count", "2", "--tokens", str(tmp_path / "tokens"),
                   "--listen", f"127.0.0.1:{port}", "--port-file", str(port_file), "--journal", str(tmp_path / "head.db")], log)
        procs.append(p)
        for _ in range(100):
            if port_file.exists() and port_file.read_text().strip():
                return p, port_file.read_text().strip()
            time.sleep(0.05)
        raise AssertionError("the head did not start: " + (tmp_path / "daemons.log").read_text())

    def start_agent(port, node):
        procs.append(start(["agent", "--head", f"127.0.0.1:{port}", "--node", node, "--simulate", "2xH100-80GB",
                            "--heartbeat-ms", "100", "--token-file", str(tmp_path / "agent.token"),
                            "--allow-root-workers"], log))

    yield start_head, start_agent
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    log.close()


def wait_for_agents(port, up):
    for _ in range(100):
        r = cli("status", "--json", "--pool", f"127.0.0.1:{port}", "--token", TEAM_TOKEN)
        if r.returncode == 0 and sum(n["agent"] == "up" for n in json.loads(r.stdout)["nodes"]) == up:
            return
        time.sleep(0.1)
    raise AssertionError("agents did not come up")


def job_env(port, node):
    return dict(os.environ, GPUPOOL_ADDRESS=f"127.0.0.1:{port}", GPUPOOL_TOKEN=TEAM_TOKEN, GPUPOOL_NODE=node,
                GPUPOOL_TEAM="vision")


def run_job(port, node, **env):
    return subprocess.run([sys.executable, "-c", JOB], env=dict(job_env(port, node), **env), capture_output=True,
                          text=True, timeout=60)


SLOW_JOB = """
import time
import gpupool

@gpupool.remote(gpus=0.5)
def slow(x):
    time.sleep(0.1)
    return x * x

print(sorted(gpupool.get([slow.submit(i) for i in range(40)])))
print("preemptions", sum(t["preemptions"] for t in gpupool.stats()["teams"]))
"""


def test_a_job_lives_through_a_head_restart(head):
    start_head, start_agent = head
    head_proc, port = start_head()
    start_agent(port, "node-0")
    wait_for_agents(port, 1)
    # 40 tasks of 0.1 s, four at a time: about a second of work, with the head killed in the middle.
    job = subprocess.Popen([sys.executable, "-c", SLOW_JOB], env=job_env(port, "node-0"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    time.sleep(0.4)
    assert job.poll() is None, job.communicate()
    head_proc.send_signal(signal.SIGKILL)
    head_proc.wait()
    time.sleep(0.3)
    start_head(port)  # the same address and journal; the agent and the job reconnect by themselves
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0, err
    results, preemptions = out.strip().splitlines()
    assert results == str(sorted(i * i for i in range(40)))
    # The new head took the job's leases back from its journal and the job reclaimed them: no
    # task was interrupted by the restart.
    assert preemptions == "preemptions 0", out + err


def test_python_jobs_share_a_head_and_its_ledger_survives_kill_9(head):
    start_head, start_agent = head
    head_proc, port = start_head()
    start_agent(port, "node-0")
    start_agent(port, "node-1")
    wait_for_agents(port, 2)

    # Two jobs of one team, in their own processes, each on its own node (tasks go anywhere in
    # the pool; with local_only they stay on the job's node).
    for node in ("node-0", "node-1"):
        job = run_job(port, node, GPUPOOL_LOCAL_ONLY="1")
        assert job.returncode == 0, job.stderr
        assert job.stdout.strip() == str(sorted((node, i * i) for i in range(8)))

    # A job on a machine the pool does not have runs every task in workers on the pool's nodes...
    away = run_job(port, "node-7")
    assert away.returncode == 0, away.stderr
    results = eval(away.stdout.strip())
    assert sorted(x for _, x in results) == [i * i for i in range(8)]
    assert {node for node, _ in results} <= {"node-0", "node-1"}
    # ...and one that must stay on its node is told what to set.
    lost = run_job(port, "node-7", GPUPOOL_LOCAL_ONLY="1")
    assert lost.returncode != 0
    assert "GPUPOOL_NODE" in lost.stderr

    usage = cli("usage", "--json", "--pool", f"127.0.0.1:{port}", "--token", TEAM_TOKEN)
    assert usage.returncode == 0, usage.stderr
    rows = json.loads(usage.stdout)["rows"]
    assert [r["group"] for r in rows] == ["vision"]
    leases_before = rows[0]["leases"]
    assert leases_before >= 2

    # kill -9 of the head; a new head on the same journal still has every closed lease.
    head_proc.send_signal(signal.SIGKILL)
    head_proc.wait()
    _, port = start_head()
    usage = cli("usage", "--json", "--pool", f"127.0.0.1:{port}", "--token", TEAM_TOKEN)
    assert usage.returncode == 0, usage.stderr
    rows = json.loads(usage.stdout)["rows"]
    assert rows[0]["group"] == "vision" and rows[0]["leases"] == leases_before

    bad = cli("usage", "--pool", f"127.0.0.1:{port}", "--token", TEAM_TOKEN, "--by", "colour")
    assert bad.returncode == 1 and "cannot group usage by 'colour'" in bad.stderr


SLEEPER = """
import os, time
import gpupool

@gpupool.remote(gpus=1)
def nap(i):
    time.sleep(0.3)
    return i

print(sum(gpupool.get([nap.submit(i) for i in range(4)])), os.getpid(), flush=True)
"""


def test_usage_by_job_shows_busy_time_the_job_reported_at_release(head):
    """A job's tasks keep its leases busy 4 x 0.3 GPU-s; when the leases go back the job says so,
    and `usage --by job` shows that busy time beside what was leased (efficiency, as Slurm's seff)
    under the job's own name (job-<host>-<pid>-<8 hex digits>)."""
    start_head, start_agent = head
    _, port = start_head()
    start_agent(port, "node-0")
    wait_for_agents(port, 1)
    job = subprocess.run([sys.executable, "-c", SLEEPER], env=job_env(port, "node-0"), capture_output=True, text=True,
                         timeout=60)
    assert job.returncode == 0, job.stderr
    total, pid = job.stdout.split()
    assert total == "6"
    rows = []
    for _ in range(50):  # the last release reaches the journal with its next group commit
        usage = cli("usage", "--json", "--by", "job", "--pool", f"127.0.0.1:{port}", "--token", TEAM_TOKEN)
        assert usage.returncode == 0, usage.stderr
        rows = json.loads(usage.stdout)["rows"]
        if rows and rows[0]["efficiency"] is not None and rows[0]["measured_gpu_hours"] == rows[0]["gpu_hours"]:
            break
        time.sleep(0.1)
    assert len(rows) == 1 and rows[0]["group"].startswith("job-") and ("-" + pid + "-") in rows[0]["group"], rows
    row = rows[0]
    assert row["measured_gpu_hours"] == row["gpu_hours"] > 0, row
    # 1.2 GPU-s of naps (timer slack may add a little, never take any away), at most what was leased.
    assert 1.2 / 3600 <= row["busy_gpu_hours"] <= row["measured_gpu_hours"], row
    assert 0 < row["efficiency"] <= 1 and abs(row["efficiency"] - row["busy_gpu_hours"] / row["gpu_hours"]) < 1e-9
    table = cli("usage", "--by", "job", "--pool", f"127.0.0.1:{port}", "--token", TEAM_TOKEN)
    assert "BUSY-HOURS" in table.stdout and "EFFICIENCY" in table.stdout and "%" in table.stdout, table.stdout


def test_an_mpirun_job_joins_a_shared_head_as_one_job_of_several_ranks(head):
    """Under mpirun with GPUPOOL_ADDRESS, each rank joins the shared head on its own node and the
    ranks are still one job: rank/ranks are right and a collective sums over all of them."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed")
    start_head, start_agent = head
    _, port = start_head()
    start_agent(port, "node-0")
    start_agent(port, "node-1")
    wait_for_agents(port, 2)
    env = job_env(port, "unused")
    env.update(OMPI_MCA_btl="self,vader,tcp", OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo")
    example = os.path.join(os.environ["GPUPOOL_SOURCE_DIR"], "examples", "python", "allreduce.py")
    # Each rank names its own node: rank r runs on node-r.
    run = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "--enable-recovery", "-np", "2",
                          "bash", "-c", f'GPUPOOL_NODE=node-$OMPI_COMM_WORLD_RANK exec {sys.executable} {example}'],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    for r in range(2):
        assert f"rank {r} of 2 on node-{r}: " in run.stdout and ": ok" in run.stdout, run.stdout
    queue = cli("usage", "--json", "--pool", f"127.0.0.1:{port}", "--token", TEAM_TOKEN)
    assert queue.returncode == 0, queue.stderr
    assert json.loads(queue.stdout)["rows"][0]["leases"] >= 2  # one on each node at least
