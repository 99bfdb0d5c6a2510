"""platform/env.example and the example secrets: env.example lists exactly the settings the portal reads
(config/ through core/env.py, the Procfile, the demo command); every example secret value is marked as one.
"""

from __future__ import annotations

import re

from tests.platform_support import (
    BASE,
    OVERLAY,
    PLATFORM,
    ROOT,
    kustomization,
    names_the_code_reads,
    read_env_file,
)


def test_it_lists_every_setting_in_env_example():
    """platform/env.example lists every setting the portal reads: config/, the Procfile, the demo command."""
    listed = set(read_env_file(PLATFORM / "env.example"))
    sources = [ROOT / "demo" / "management" / "commands" / "demo.py", ROOT / "demo" / "data.py"]
    others = set(re.findall(r"os\.environ\.get\(\s*\"(PORTAL_[A-Z0-9_]+)\"", "\n".join(p.read_text() for p in sources)))
    read = {name for name in names_the_code_reads() if not name.endswith("_FILE")} | others
    assert listed == read, f"missing: {read - listed}, not read: {listed - read}"


def test_it_marks_every_example_secret_value():
    for folder in (BASE, OVERLAY):
        for generator in kustomization(folder).get("secretGenerator", []):
            for entry in generator["envs"]:
                assert "example" in entry
                for name, value in read_env_file(folder / entry).items():
                    assert "EXAMPLE-ONLY" in value or name == "REDIS_URL", (
                        f"{entry}: {name} is not marked as an example"
                    )
