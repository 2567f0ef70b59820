"""The project's package and scripts loaded as modules by the benchmark tools, from their files beside this folder, with
the interpreter's path left as it is: the package as `ppo_utils` (so that the scripts' own `from ppo_utils... import`
find it wherever a tool runs from), each script under its file's stem, once; and the tools' one-line error."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def refuse(message):
    """Ends a tool with its one-line error."""
    raise SystemExit(f"error: {message}")


def load_package(name):
    """The project's package `name` (ppo_utils), loaded from its folder as the scripts are loaded from their files."""
    if name not in sys.modules:
        folder = ROOT / name
        spec = importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def load_script(name):
    """The project's script `name` (ppo_masked.py) as a module, loaded once (a test's copy, if loaded, is reused)."""
    if Path(name).stem in sys.modules:
        return sys.modules[Path(name).stem]
    load_package("ppo_utils")
    spec = importlib.util.spec_from_file_location(Path(name).stem, ROOT / name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # tyro reads the Args docstrings through the module
    spec.loader.exec_module(module)
    return module
