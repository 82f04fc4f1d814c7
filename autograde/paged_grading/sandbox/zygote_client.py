"""The process jupyter_client starts for a grading kernel forked by the student's kernel zygote.

    python zygote_client.py SOCKET CWD IPYKERNEL_ARGUMENTS...

It runs outside the sandbox and runs no student code: it asks the zygote (``kernel_zygote.py``)
for a kernel working in CWD, then stands for that kernel, so that jupyter_client manages it
as it manages any kernel process: this process ends when the kernel ends, with its exit code
(or killed by the same signal), and when jupyter_client stops or kills this process, its
connection closes and the zygote kills the kernel. Standard library only, so it starts at once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def main(argv: list[str]) -> int:
    socket_path, cwd, *kernel_argv = argv[1:]
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(socket_path)
    connection.sendall((json.dumps({"cwd": cwd, "argv": kernel_argv}) + "\n").encode())
    data = b""
    while True:
        chunk = connection.recv(65536)
        if not chunk:
            return 1  # the zygote died: so did the kernel
        data += chunk
        while b"\n" in data:
            line, data = data.split(b"\n", 1)
            answer = json.loads(line)
            if "exit" in answer:
                code = int(answer["exit"])
                if code < 0:  # killed by a signal: end the same way
                    signal.signal(-code, signal.SIG_DFL)
                    os.kill(os.getpid(), -code)
                return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
