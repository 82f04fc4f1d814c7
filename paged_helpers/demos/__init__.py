"""The chapter's demos behind `python run.py NAME`, one module per figure.

Each module defines ``add_arguments(parser)`` and ``run(args) -> dict``; run.py prints the
dict as JSON. Demos that need the learner's classes take them from the notebooks in
``--impl DIR`` (default: the course's own notebooks/ folder) through notebook_loader, so
this package itself never contains a solution.

``DEMOS`` (command -> module name) is found, not listed: every module of this package that
defines ``run`` and ``add_arguments`` is a demo, named by its ``COMMAND`` when it has one
(``copy_on_write`` is ``cow``, ``gpu_check`` is ``gpu-check``), else by its module name. A new
demo is a new module and nothing else.
"""

import pkgutil
from importlib import import_module


def _find_demos() -> dict[str, str]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = import_module(f".{info.name}", __name__)
        if callable(getattr(module, "run", None)) and callable(getattr(module, "add_arguments", None)):
            found[getattr(module, "COMMAND", info.name)] = info.name
    return found


DEMOS = _find_demos()
