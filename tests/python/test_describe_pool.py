import os

import pytest

import gpupool


def test_version_matches_the_library():
    assert gpupool.__version__ == gpupool.version()
    assert gpupool.version().count(".") == 2


def test_simulated_pool():
    pool = gpupool.describe_pool(simulate="4xH100-80GB,2xL4", node_count=2)
    assert pool["driver"] == "simulated"
    assert [n["name"] for n in pool["nodes"]] == ["node-0", "node-1"]
    gpus = pool["nodes"][0]["gpus"]
    assert [g["model"] for g in gpus] == ["H100-80GB"] * 4 + ["L4"] * 2
    assert gpus[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert gpus[0]["compute_capability"] == "9.0"
    assert gpus[0]["health"] == "healthy"
    assert gpus[4]["mig_mode"] == "unsupported"


def test_config_with_mig():
    path = os.path.join(os.environ["GPUPOOL_SOURCE_DIR"], "examples", "pool.yaml")
    pool = gpupool.describe_pool(config=path)
    a100 = pool["nodes"][2]["gpus"][0]
    assert a100["mig_mode"] == "enabled"
    assert sorted(i["profile"] for i in a100["instances"]) == [
        "1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]


def test_bad_input_raises_with_code():
    with pytest.raises(gpupool.GpupoolError) as info:
        gpupool.describe_pool(simulate="4xH100")
    assert "unknown GPU model 'H100'" in str(info.value)
    assert info.value.code == "INVALID_ARGUMENT"
