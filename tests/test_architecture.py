import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_it_keeps_the_import_layers_of_the_design():
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


# Each contract of .importlinter, broken on purpose in a copy of the tree: the linter must say so. This is how to
# check a contract you add (docs/architecture.md "Checking the stack").
WRONG_IMPORTS = [  # (contract, module, the line added to it)
    ("stack", "accounts/models.py", "from jobs.models import Job"),  # a lower app importing a higher one
    ("pure-core", "jobs/lifecycle.py", "import django"),
    ("adapters", "clusters/sandbox.py", "import django"),
    ("layers", "jobs/selectors.py", "from jobs import api"),  # a selector importing an interface
    ("layers", "jobs/unlayered.py", "X = 1"),  # a new module nobody gave a layer (the contract is exhaustive)
    ("one-cluster-client", "jobs/services.py", "import kubernetes"),
    ("client", "portalctl/client.py", "import django"),
]


def _packages() -> list[str]:
    text = (ROOT / ".importlinter").read_text()
    block = text.split("root_packages =", 1)[1].split("\n\n", 1)[0].split("include_external_packages", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


@pytest.mark.parametrize(("contract", "module", "line"), WRONG_IMPORTS)
def test_each_import_contract_fails_on_a_deliberate_wrong_import(contract, module, line, tmp_path):
    for package in _packages():
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    lint = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--contract", contract]
    kept = subprocess.run(lint, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert kept.returncode == 0, kept.stdout + kept.stderr  # the copy keeps it before the change
    with open(tmp_path / module, "a") as handle:
        handle.write(f"\n{line}  # deliberately wrong\n")
    broken = subprocess.run(lint, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert broken.returncode != 0 and "BROKEN" in broken.stdout, broken.stdout + broken.stderr
