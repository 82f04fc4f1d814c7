"""Where the course runs: decided once, when `paged_helpers` is first imported.

CUDA when torch sees a GPU; otherwise the CPU, with Triton's interpreter. The interpreter must
be switched on (``TRITON_INTERPRET=1``) before anything imports triton, and one process can't
switch modes later, so this module never imports triton itself and the package imports this
module first.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DeviceInfo:
    """The one decision every notebook shares."""

    device: torch.device
    triton_interpreted: bool
    triton_version: str | None
    problem: str | None  # a sentence for the learner when Triton can't run as intended

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def banner(self) -> str:
        where = torch.cuda.get_device_name(self.device) if self.is_cuda else "CPU"
        if self.triton_version is None:
            triton_part = "triton not installed (kernel notebooks need Linux; see README)"
        elif self.problem is not None:
            triton_part = f"triton {self.triton_version} cannot run kernels here (see below)"
        elif self.triton_interpreted:
            triton_part = f"triton {self.triton_version} interpreted (no GPU: kernels run slowly, on the CPU)"
        else:
            triton_part = f"triton {self.triton_version} compiled"
        text = f"paged_helpers: device {self.device} ({where}) | torch {torch.__version__} | {triton_part}"
        return text if self.problem is None else f"{text}\n  ! {self.problem}"


def _installed_triton_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton")
    except PackageNotFoundError:
        return None


def _decide() -> DeviceInfo:
    triton_version = _installed_triton_version()
    # Triton 3.9 warns on stderr at its first compile when this is unset (the default changes in
    # 3.10), and a notebook cell that writes stderr scores 0 under nbgrader. Keep 3.9's default.
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    if torch.cuda.is_available():
        interpreted = os.environ.get("TRITON_INTERPRET") == "1"
        return DeviceInfo(torch.device("cuda"), interpreted, triton_version, None)
    problem = None
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        problem = (
            "triton was imported before paged_helpers, so Triton kernels cannot run on this CPU. "
            "Fix: restart the kernel (Kernel > Restart Kernel) and run `import paged_helpers as ph` "
            "before any cell that imports triton."
        )
    else:
        os.environ["TRITON_INTERPRET"] = "1"
    return DeviceInfo(torch.device("cpu"), problem is None, triton_version, problem)


INFO: DeviceInfo = _decide()
DEVICE: torch.device = INFO.device


def banner() -> str:
    """One line: device, torch and triton versions, interpreted or compiled."""
    return INFO.banner()
