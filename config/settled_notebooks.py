"""A notebook that nobody changed opens in JupyterLab without the unsaved-changes mark.

The course's notebooks are committed with ``"language_info": {"name": "python"}`` only: the
rest of it (the Python version above all) is the machine's, not the course's. When the kernel
connects, JupyterLab writes the kernel's whole ``language_info`` into the notebook's metadata,
and that write marks the tab dirty (and autosave then rewrites the file) before anything ran.

``SettledContentsManager`` serves a notebook whose ``language_info`` is a part of what this
server's Python kernel reports with the kernel's whole ``language_info`` filled in, so the
kernel's later write changes nothing. The file on disk is untouched until the learner saves.
Used by config/learner-lab (``make lab``, Binder) and demo/jupyter (``make demo``), each from
its jupyter_server_config.py.
"""

from __future__ import annotations

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager


def kernel_language_info() -> dict:
    """What the Python kernel of this server's interpreter says in its kernel_info reply."""
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


def settle(notebook: dict) -> bool:
    """Fill in ``notebook``'s language_info from the kernel's where it is a part of it."""
    metadata = notebook.get("metadata")
    if not isinstance(metadata, dict):
        return False
    if (metadata.get("kernelspec") or {}).get("language", "python") != "python":
        return False
    info = metadata.get("language_info")
    if not isinstance(info, dict):
        return False
    full = kernel_language_info()
    if info == full or any(full.get(key) != value for key, value in info.items()):
        return False
    metadata["language_info"] = full
    return True


class SettledContentsManager(AsyncLargeFileManager):
    """Jupyter Server's default contents manager, serving notebooks settled (see the module)."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if content and model.get("type") == "notebook" and isinstance(model.get("content"), dict):
            settle(model["content"])
        return model
