"""Save, then hold the kernel: the pause's checkpoint and the wait for its release in one shell request.

A kernel runs its shell requests one at a time, so while this request holds it no cell can run: a cell a
user starts meanwhile waits behind it. The server removes the hold file when it is done with the kernel
(released: the kernel is shut down while held, and the waiting cell never ran; or the pause failed: the
kernel goes on, and the waiting cell runs then). The result of the save is printed as one line at once,
so the server need not wait for the hold to end to read it.
"""
from __future__ import annotations

import json
import os
import time

from . import api


def save_then_hold(request: str, hold_file: str, seconds: float) -> str:
    answer = api.call(request)
    print(json.dumps({"gkews_saved": json.loads(answer)}), flush=True)
    if json.loads(answer)["ok"]:
        deadline = time.monotonic() + seconds  # bounded: a server that vanished does not hold us forever
        while os.path.exists(hold_file) and time.monotonic() < deadline:
            time.sleep(0.05)
    return answer
