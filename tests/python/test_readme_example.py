"""The README's Python example, run exactly as written there, in its own interpreter."""
import os
import re
import subprocess
import sys


def test_readme_python_example_runs_as_documented():
    readme = open(os.path.join(os.environ["GPUPOOL_SOURCE_DIR"], "README.md")).read()
    section = readme[readme.index("## The Python API"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "81 0.5",
        "TaskError(ValueError) fail cpu",
        "100 {'k': [1, 2]}",
    ]
