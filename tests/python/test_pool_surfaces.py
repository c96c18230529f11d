"""`gpupool devices --json` and `gpupool.describe_pool()` describe the same pool with the same
fields: both are driven by gpupool::ForEachField (pool_description.h), and this test keeps it so
(issue 19: `compute_capability` had drifted to a tuple in Python and "X.Y" in the JSON)."""
import json
import os
import subprocess

import pytest

import gpupool

CLI = os.environ.get("GPUPOOL_CLI", "")
EXAMPLE_CONFIG = os.path.join(os.environ.get("GPUPOOL_SOURCE_DIR", ""), "examples", "pool.yaml")


def same_process_independent(value):
    """`value` with every "uuid" replaced by its kind ("GPU", "MIG"): simulated UUIDs are hashes
    seeded per process (absl::Hash), so the CLI's process and this one give different ones."""
    if isinstance(value, dict):
        return {k: (v.split("-")[0] if k == "uuid" and v else same_process_independent(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [same_process_independent(v) for v in value]
    return value


def devices_json(*args):
    if not CLI:
        pytest.skip("GPUPOOL_CLI is not set (run through CTest)")
    out = subprocess.run([CLI, "devices", "--json"] + list(args), capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("cli_args,python_args", [
    (["--simulate", "4xH100-80GB,2xL4", "--node-count", "2"],
     {"simulate": "4xH100-80GB,2xL4", "node_count": 2}),
    (["--config", EXAMPLE_CONFIG], {"config": EXAMPLE_CONFIG}),  # MIG instances, prices, labels
])
def test_every_gpu_field_is_the_same_in_json_and_python(cli_args, python_args):
    from_json = same_process_independent(devices_json(*cli_args))
    from_python = same_process_independent(gpupool.describe_pool(**python_args))

    assert set(from_python) - {"notice"} == set(from_json)
    assert from_python["driver"] == from_json["driver"]
    assert len(from_python["nodes"]) == len(from_json["nodes"]) > 0
    for node_py, node_json in zip(from_python["nodes"], from_json["nodes"]):
        assert set(node_py) == set(node_json)
        assert node_py["name"] == node_json["name"]
        assert node_py["labels"] == node_json["labels"]
        assert len(node_py["gpus"]) == len(node_json["gpus"]) > 0
        for gpu_py, gpu_json in zip(node_py["gpus"], node_json["gpus"]):
            assert sorted(gpu_py) == sorted(gpu_json), node_py["name"]
            for field in gpu_json:
                assert gpu_py[field] == gpu_json[field], (node_py["name"], gpu_json["index"], field)
                assert type(gpu_py[field]) is type(gpu_json[field]), field


def test_the_comparison_covers_the_nested_and_enum_fields():
    gpu = gpupool.describe_pool(config=EXAMPLE_CONFIG)["nodes"][2]["gpus"][0]
    assert gpu["compute_capability"] == "8.0"
    assert gpu["mig_mode"] == "enabled"
    assert gpu["health"] == "healthy"
    assert gpu["instances"] and "compute_instances" in gpu["instances"][0]
