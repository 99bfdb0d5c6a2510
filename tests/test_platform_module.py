import sys
import sysconfig
from pathlib import Path


def test_it_imports_platform_from_the_standard_library():
    import platform

    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    assert Path(platform.__file__).resolve().parent == stdlib
    assert platform.python_version() == ".".join(map(str, sys.version_info[:3]))


def test_it_keeps_the_deployment_folder_out_of_python_packages():
    root = Path(__file__).resolve().parent.parent
    assert (root / "platform").is_dir()
    assert not (root / "platform" / "__init__.py").exists()
