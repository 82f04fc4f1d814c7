"""KernelWatch: a widget that says so when its kernel is gone.

ipywidgets' own controls go quiet after a kernel restart (clicks do nothing, nothing says why).
Put a KernelWatch next to them: it draws nothing while the kernel is there, and a warning as
soon as JupyterLab marks the widgets disconnected (a restart, a dead or shut-down kernel).
"""

from __future__ import annotations

import anywidget
import traitlets

from . import display, stage


class KernelWatch(anywidget.AnyWidget):
    """Also puts ``display.SNAPSHOT_HIDING_CSS`` on the page: a live widget's static picture is hidden."""

    _esm = stage.widget_module("kernel_watch.js")
    snapshot_hiding_css = traitlets.Unicode(display.SNAPSHOT_HIDING_CSS).tag(sync=True)
