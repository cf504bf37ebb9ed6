"""Save, then hold the kernel: the pause's checkpoint and the wait for its release in one shell request.

A kernel runs its shell requests one at a time, so while this request holds it no cell can run: a cell a
user starts meanwhile waits behind it. Interrupts are ignored while held (Jupyter interrupts a kernel
before shutting it down, which would otherwise let the waiting cell run in the last moment). The hold ends
when the server removes the hold file (the pause failed or was undone: the kernel goes on and the waiting
cell runs then), when the kernel is shut down (released: the process exits here, its open files closed as
an exit would, and the waiting cell never ran), or when its bound runs out (the server sees that and
checkpoints again). The save's result is printed as one line at once, so the server need not wait for the
hold to end to read it.

A kernel that lives on through the pause (GPU suspend, a Pod snapshot) is still held when the resume
begins, with the cells sent meanwhile waiting behind the hold. The resume's verify (and restore) must see
the state of the checkpoint, not that state after those cells, so the server asks the held kernel through
files beside its hold file (`.call` in, `.answer` out) and lets it go only afterwards: then the waiting
cells run, on the verified state. Once detached (the kernel is to outlive a server restart) the hold has
no bound; it ends when the server removes the file. The held kernel writes its pid into the hold file,
so that a server can tell a kernel in its hold from a fresh one started under the same kernel id.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

from . import api
from .checkpoint import current_shell
from .shutdown import exit_as_a_shutdown_would


def save_then_hold(request: str, hold_file: str, seconds: float) -> api.Answer:
    answer = api.answer(request)
    # one write, on a line of its own: a thread of the notebook that prints meanwhile cannot split it
    sys.stdout.write("\n" + json.dumps({"gkews_saved": answer.payload}) + "\n")
    sys.stdout.flush()
    if answer.payload["ok"]:
        with _interrupts_ignored():
            _hold(hold_file, seconds)
    return answer


def hold_path(runtime_dir: str, kernel_id: str) -> str:
    """The hold file of a kernel: beside its connection file, in the server's runtime folder."""
    return os.path.join(runtime_dir, f"gkews-hold-{kernel_id}")


def hold_at_start(seconds: float = 600.0) -> None:
    """A kernel a resume starts waits in a hold before it runs any cell: the resume restores into it through
    the hold file (as into a kernel that lived on), then lets it go, and the cells sent meanwhile run on the
    restored state (a cell sent the moment the kernel was up ran on an empty namespace, and the restore then
    undid it). The server marks such a start by writing START into the kernel's hold file before starting
    it; the kernel finds the file beside its connection file. Bounded, so that a server gone meanwhile does
    not hold it for ever."""
    path = _start_hold_file()
    if path is None:
        return
    shell = current_shell()
    before = dict(shell.user_ns) if shell is not None else {}
    with _interrupts_ignored():
        _hold(path, seconds)
    if shell is not None:
        restored = {n for n, v in shell.user_ns.items() if n not in before or before[n] is not v}
        _keep_shown(shell, restored)


def _keep_shown(shell, restored: set) -> None:
    """IPython hides what the namespace holds at the end of the kernel's start, after its startup files ran
    (`user_ns_hidden`: %who and the checkpoint's choice of variables leave such names out), and the start
    hold runs before that: the variables restored in it would never be saved again. So once that step is done
    the restored names are shown again, as long as they still hold what was restored; what a startup file
    defined stays hidden, as in a fresh kernel."""
    values = {n: shell.user_ns[n] for n in restored if n in shell.user_ns}
    try:
        from ipykernel.kernelapp import IPKernelApp
        app = IPKernelApp.instance()
        init_code = app.init_code  # the step that runs the startup files, then hides the namespace
    except Exception:  # not an ipykernel kernel: nothing hides at its start
        return
    if not values:
        return

    def init_code_then_show_restored():
        init_code()
        for name, value in values.items():
            if name in shell.user_ns_hidden and shell.user_ns_hidden[name] is value:
                del shell.user_ns_hidden[name]
    app.init_code = init_code_then_show_restored


def _start_hold_file() -> str | None:
    try:
        from ipykernel.kernelapp import IPKernelApp
        if not IPKernelApp.initialized():
            return None
        connection = IPKernelApp.instance().connection_file
    except Exception:  # not an ipykernel kernel (a plain IPython, a test): nothing to wait for
        return None
    name = os.path.basename(connection or "")
    if not (name.startswith("kernel-") and name.endswith(".json")):
        return None
    path = hold_path(os.path.dirname(connection), name[len("kernel-"):-len(".json")])
    try:
        with open(path) as f:
            return path if f.read().strip() == START else None
    except OSError:
        return None


def _hold(hold_file: str, seconds: float) -> None:
    shell = current_shell()
    me = str(os.getpid())
    if not _sign(hold_file, me):  # so that the server can tell us from a fresh kernel
        return  # the server let go before the save was done: nothing to hold
    # Bounded, so that a pause that got stuck does not hold the user's cells for ever; time in which the
    # process did not run (a Pod snapshot, SIGSTOP) does not count. Detached (to outlive its server): no bound.
    # Held while the file is the one we signed: a pause that follows a resume at once makes a new one under
    # the same name between two of our looks, and that new hold is not this one.
    detached, held, last = False, 0.0, time.monotonic()
    server = os.getppid()
    while _signed_by(hold_file, me) and (detached or held < seconds):
        if not detached and os.getppid() != server:
            # the server died: end as ipykernel's parent poller ends a kernel whose server is gone (a start hold
            # comes before that poller runs, and a kernel held there lived on for the whole bound)
            os._exit(1)
        if os.path.exists(hold_file + DETACH_SUFFIX):  # asked while held: no shell request can reach us now
            parent = detach_from_parent()
            detached = True
            with contextlib.suppress(FileNotFoundError):
                os.remove(hold_file + DETACH_SUFFIX)
        if os.path.exists(hold_file + CALL_SUFFIX):
            _answer_call(hold_file)
        if getattr(shell, "exit_now", False):  # a shutdown request arrived (ipykernel's do_shutdown)
            time.sleep(0.2)  # its reply goes out from the control thread meanwhile
            exit_as_a_shutdown_would()  # never back to the shell loop: the waiting cell would run
        time.sleep(0.05)
        held, last = held + min(time.monotonic() - last, 1.0), time.monotonic()
    if _signed_by(hold_file, me):
        _sign(hold_file, "")  # left: calls through the hold file would find no one
    if detached:
        attach_to_parent(parent)


def _sign(hold_file: str, text: str) -> bool:
    """Write into the hold file the server made (never create it: a missing file means released)."""
    try:
        with open(hold_file, "r+") as f:
            f.write(text)
            f.truncate()
        return True
    except FileNotFoundError:
        return False


def _signed_by(hold_file: str, pid: str) -> bool:
    try:
        with open(hold_file) as f:
            return f.read().strip() == pid
    except FileNotFoundError:
        return False


def held_pid(hold_file: str) -> int | None:
    """The pid of the kernel in this hold, or None (no hold, or one not yet entered)."""
    try:
        with open(hold_file) as f:
            return int(f.read().strip() or 0) or None
    except (FileNotFoundError, ValueError):
        return None


def _answer_call(hold_file: str) -> None:
    """Run the server's request from `<hold>.call` here, in the held kernel; the answer goes to `<hold>.answer`.
    Both files are written whole, then renamed, so neither side ever reads half of one."""
    call_path = hold_file + CALL_SUFFIX
    call: dict = {}
    try:
        with open(call_path) as f:
            call = json.load(f)
        answer = json.loads(api.call(call["request"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        answer = {"ok": False, "error": f"unreadable call file {call_path}: {exc}", "type": "ValueError"}
    partial = hold_file + ANSWER_SUFFIX + ".partial"
    with open(partial, "w") as f:
        json.dump({"id": call.get("id") if isinstance(call, dict) else None, "answer": answer}, f, default=str)
    os.replace(partial, hold_file + ANSWER_SUFFIX)
    with contextlib.suppress(FileNotFoundError):
        os.remove(call_path)


#: what a hold file says before a kernel the resume starts has entered it (hold_at_start)
START = "resume-start"
#: beside the hold file: the server asks a held kernel to outlive it (GPU suspend keeps it across restarts)
DETACH_SUFFIX = ".detach"
#: beside the hold file: a request for the held kernel (JSON {"id", "request"}), and its answer
CALL_SUFFIX = ".call"
ANSWER_SUFFIX = ".answer"


def detach_from_parent() -> int | None:
    """Let this kernel outlive the server that started it: ipykernel's parent poller exits the kernel once
    its parent changes, so give it a parent pid that equals every pid. Pure Python: it works while the
    process's CUDA calls are locked. Returns the parent it watched before."""
    from ipykernel.kernelapp import IPKernelApp

    class AnyParent(int):
        def __ne__(self, other):
            return False

        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    poller = getattr(IPKernelApp.instance(), "poller", None)
    if poller is None:
        return None
    before = poller.parent_pid
    poller.parent_pid = AnyParent(1)
    return before


def attach_to_parent(parent: int | None) -> None:
    """Watch the parent again after a hold that ended with the same server (not after an adoption: our
    parent is another process then, and a server that adopted us never stops us by exiting)."""
    from ipykernel.kernelapp import IPKernelApp
    poller = getattr(IPKernelApp.instance(), "poller", None)
    if poller is not None and parent and os.getppid() == parent:
        poller.parent_pid = parent


@contextlib.contextmanager
def _interrupts_ignored():
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to ignore here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
