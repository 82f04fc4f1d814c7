# `make demo`'s JupyterLab: the demo notebook opens without the unsaved-changes mark
# (config/settled_notebooks.py). The .json beside this file hides nbgrader; Jupyter reads both.
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "settled_notebooks", Path(__file__).resolve().parents[2] / "config" / "settled_notebooks.py"
)
_settled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_settled)
c.ServerApp.contents_manager_class = _settled.SettledContentsManager  # noqa: F821 (traitlets' config object)
