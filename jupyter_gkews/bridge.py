"""Calls into kernel_state inside a running kernel, silently, one JSON request per call.

The request travels as a user_expression of an empty, silent execute request, so nothing enters the
user's history or output. The server's activity tracker counts every IOPub message as activity, whenever
it reads it (possibly after the call returned): the messages answering our own sessions (their ids start
with BRIDGE_SESSION) leave the kernel's and the server's last_activity as they were, and both are put
back after each call too: our own calls never keep a session looking busy, nor reset an idle timer.

Every call races a watch on the kernel itself: a kernel that is shut down, restarted (a new process, on
new ports) or whose process is gone ends the call within a second, and one whose heartbeat stays silent
for heartbeat_grace seconds too; only a kernel that lives and works waits for the call's timeout.
"""
from __future__ import annotations

import asyncio
import json
import os
import queue
import uuid
from datetime import datetime, timezone

from kernel_state.hold import ANSWER_SUFFIX, CALL_SUFFIX, held_pid, hold_path

from .errors import KernelCallError, KernelStateMissing
from .kernelready import kernel_ready, own_client

SAVED_LINE = '{"gkews_saved"'
PROGRESS_LINE = '{"gkews_progress"'
BRIDGE_SESSION = "gkews-bridge-"  # the start of our clients' session ids

__all__ = ["KernelBridge", "KernelCallError", "KernelStateMissing"]


class KernelDied(KernelCallError):
    """The kernel went away during the call (shut down, restarted, process gone, heartbeat silent)."""


class Hold:
    """A kernel held after its checkpoint (kernel_state.hold): no cell runs in it until release().

    ended: the kernel left the hold on its own (the user interrupted it, or its bound ran out), so a cell
    may have run since the checkpoint."""

    def __init__(self, bridge: "KernelBridge", kernel_id: str, path: str, task: asyncio.Task, client, kernel,
                 before):
        self.bridge, self.kernel_id, self.path = bridge, kernel_id, path
        self._task, self._client, self._kernel, self._before = task, client, kernel, before
        self._pid = kernel_pid(kernel)  # the process it checkpointed

    @property
    def ended(self) -> bool:
        return self._task.done()

    @property
    def restarted(self) -> bool:
        """Its kernel runs another process than the one in the hold (restarted, or killed and brought back
        by Jupyter's restarter): that one is not held, and the hold's request never ends."""
        now = kernel_pid(self._kernel)
        return self._pid is not None and now is not None and now != self._pid

    async def release(self) -> None:
        """Let the kernel go (a no-op on a kernel already shut down); idempotent."""
        _remove(self.path)
        if self._client is None:
            return
        client, self._client = self._client, None
        if self.kernel_id in self.bridge.kernel_manager:  # it leaves the hold within 50 ms; bounded all the same
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 5.0)
            except BaseException:
                pass
        self._task.cancel()
        client.stop_channels()
        await self.bridge._restore_activity(self._kernel, self._before)


class KernelBridge:
    #: seconds between two looks at a kernel during a call; seconds of silent heartbeat that mean dead
    liveness_interval = 0.5
    heartbeat_grace = 10.0

    def __init__(self, kernel_manager, timeout: float = 1800.0, log=None):
        self.kernel_manager, self.timeout, self.log = kernel_manager, timeout, log

    async def call(self, kernel_id: str, request: dict, *, label: str = "", on_progress=None,
                   timeout: float | None = None, hold_file: str | None = None) -> dict:
        """Run kernel_state.api.call(request) in the kernel; returns its result or raises KernelCallError.
        A kernel in the hold at hold_file answers there, ahead of the cells waiting behind its hold."""
        label = label or kernel_id
        timeout = timeout or self.timeout
        kernel, client, before = self._open(kernel_id, label)
        running = []  # the kernel has begun our request (no cell of the user's runs then)
        progress = _progress_hook(on_progress)

        def hook(msg):
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "busy":
                running.append(True)
            progress(msg)
        try:
            payload, pid = None, kernel_pid(kernel)
            if hold_file and pid is not None and held_pid(hold_file) == pid:
                payload = await self._unless_dead(kernel_id, kernel, client, label,
                                                  call_held(hold_file, pid, request, timeout))
            if payload is None:  # not held (or it left its hold before taking the call): an ordinary request
                reply = await self._unless_dead(kernel_id, kernel, client, label, self._execute(
                    client, _expression("api", "answer", json.dumps(request)), timeout, hook))
                payload = self._answer_json(kernel, label, reply)
        except (TimeoutError, asyncio.TimeoutError):
            why = ""
            if running:  # our call, not a cell, holds the kernel: it would stay in it, the user's cells behind
                why = ": it was interrupted, so the kernel runs cells again" if await self._interrupt(kernel_id) \
                    else ": it did not take an interrupt either; interrupt or restart it (Kernel menu)"
            raise KernelCallError(f"the kernel of {label} did not answer within {timeout:.0f} s{why}") from None
        except RuntimeError as exc:  # kernel_ready: the kernel died, or does not answer
            raise KernelCallError(f"the kernel of {label} is not responding: {exc}") from None
        finally:
            client.stop_channels()
            await self._restore_activity(kernel, before)
        return _result(payload)

    async def send(self, kernel_id: str, request: dict, *, label: str = "", timeout: float | None = None,
                   hold_file: str | None = None) -> dict:
        """Like call(), but queued behind whatever the kernel runs now (a long cell): the request is sent at
        once, without the kernel_info handshake a running cell leaves unanswered, and only its reply on the
        shell channel is awaited, at most timeout seconds. After a timeout the request stays queued and the
        kernel runs it once its cell ends. A kernel in the hold at hold_file answers there."""
        label = label or kernel_id
        timeout = timeout or self.timeout
        kernel, client, _before = self._open(kernel_id, label)  # our messages leave its activity alone
        try:
            payload, pid = None, kernel_pid(kernel)
            if hold_file and pid is not None and held_pid(hold_file) == pid:
                payload = await self._unless_dead(kernel_id, kernel, client, label,
                                                  call_held(hold_file, pid, request, timeout))
            if payload is None:
                msg_id = client.execute("", silent=True, store_history=False, user_expressions={
                    "gkews": _expression("api", "answer", json.dumps(request))})
                reply = await self._unless_dead(kernel_id, kernel, client, label,
                                                asyncio.wait_for(_shell_reply(client, msg_id), timeout))
                payload = self._answer_json(kernel, label, reply)
        except (TimeoutError, asyncio.TimeoutError):
            raise KernelCallError(f"the kernel of {label} did not answer within {timeout:.0f} s (a cell still "
                                  f"runs: it takes the call when the cell ends)") from None
        finally:
            client.stop_channels()
        return _result(payload)

    async def save_and_hold(self, kernel_id: str, request: dict, hold_file: str, *, label: str = "",
                            on_progress=None, hold_seconds: float | None = None) -> tuple[dict, Hold]:
        """Checkpoint the kernel and keep it held (see kernel_state.hold); the save's result and the Hold.
        On any failure the kernel is not held."""
        label = label or kernel_id
        kernel, client, before = self._open(kernel_id, label)
        try:
            with open(hold_file, "w"):
                pass
        except OSError:
            client.stop_channels()
            raise
        saved = asyncio.get_running_loop().create_future()
        running = []  # the kernel has begun our request (it is no cell of the user's that runs then)

        def hook(msg):
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "busy":
                running.append(True)
            _progress_hook(on_progress)(msg)
            if msg["msg_type"] == "stream" and not saved.done():
                for line in msg["content"]["text"].splitlines():
                    found = _marked(line, SAVED_LINE)  # a thread of the notebook may print on the same line
                    if found is not None and isinstance(found.get("gkews_saved"), dict):
                        saved.set_result(found["gkews_saved"])
                        break
        expr = _expression("hold", "save_then_hold", json.dumps(request), hold_file,
                           hold_seconds or self.timeout)
        task = asyncio.create_task(self._execute(client, expr, self.timeout + (hold_seconds or self.timeout), hook))
        hold = Hold(self, kernel_id, hold_file, task, client, kernel, before)

        async def until_saved():
            await asyncio.wait({saved, task}, return_when=asyncio.FIRST_COMPLETED)
            if saved.done():
                return saved.result()
            return self._answer_json(kernel, label, task.result())
        try:
            result = await asyncio.wait_for(
                self._unless_dead(kernel_id, kernel, client, label, until_saved()), self.timeout)
        except (TimeoutError, asyncio.TimeoutError):
            why = await self._interrupt_own_call(kernel_id, kernel, label, task) if running else ""
            await hold.release()
            raise KernelCallError(f"the kernel of {label} did not answer within {self.timeout:.0f} s"
                                  + why) from None
        except RuntimeError as exc:
            await hold.release()
            raise KernelCallError(f"the kernel of {label} is not responding: {exc}") from None
        except BaseException:
            await hold.release()
            raise
        if not result["ok"]:
            await hold.release()
            raise KernelCallError(result["error"], kind=result.get("type"))
        return result["result"], hold

    async def _interrupt_own_call(self, kernel_id: str, kernel, label: str, task: asyncio.Task) -> str:
        """Our checkpoint call ran past its time in the kernel (a value whose saving waits on a lock or a
        connection): interrupt it, or the kernel stayed in it, every cell of the user's queued behind it, and
        the next pause called the kernel busy with a cell. What to add to the message, naming the value."""
        if not await self._interrupt(kernel_id):
            return ": it did not take an interrupt either; interrupt or restart it (Kernel menu)"
        try:
            reply = await asyncio.wait_for(asyncio.shield(task), 10.0)
            self._answer_json(kernel, label, reply)
        except KernelCallError as exc:  # the interrupt's own answer: which value the save was at
            detail = str(exc).split("KeyboardInterrupt: ", 1)[-1]
            return f": its checkpoint was interrupted ({detail}), so the kernel runs cells again"
        except Exception:  # it did not answer the interrupt either: said as it is
            return ": it did not answer an interrupt either; interrupt or restart it (Kernel menu)"
        return ""

    async def _interrupt(self, kernel_id: str) -> bool:
        try:
            interrupted = self.kernel_manager.interrupt_kernel(kernel_id)
            if asyncio.iscoroutine(interrupted) or isinstance(interrupted, asyncio.Future):
                await interrupted
            return True
        except Exception:
            return False

    # -- parts ----------------------------------------------------------------------------------------
    def _open(self, kernel_id: str, label: str):
        km = self.kernel_manager
        if kernel_id not in km:
            raise KernelCallError(f"no running kernel {kernel_id} for {label}")
        kernel = km.get_kernel(kernel_id)
        before = (getattr(kernel, "last_activity", None), getattr(km, "last_kernel_activity", None))
        # A session of its own: the kernel routes replies by the client's session id, and every
        # kernel.client() shares the manager's; a hold's client stays connected while others come and go.
        _ignore_our_activity(kernel, km)
        client = own_client(kernel, BRIDGE_SESSION)
        client.start_channels()
        return kernel, client, before

    @staticmethod
    async def _execute(client, expr: str, timeout: float, hook):
        await kernel_ready(client, timeout=60)
        return await client.execute_interactive("", silent=True, store_history=False,
                                                user_expressions={"gkews": expr}, timeout=timeout,
                                                output_hook=hook)

    async def _unless_dead(self, kernel_id: str, kernel, client, label: str, work):
        """Await work, unless the kernel dies first: then KernelDied, within about a second."""
        task = asyncio.ensure_future(work)
        watch = asyncio.create_task(self._death(kernel_id, kernel, client))
        try:
            done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            watch.cancel()
        if task in done:
            return task.result()
        task.cancel()
        raise KernelDied(f"the kernel of {label} {watch.result()} during the call; its notebook keeps "
                         f"what the kernel holds now (nothing, if it restarted)")

    async def _death(self, kernel_id: str, kernel, client) -> str:
        """Return how the kernel went away; never returns while it lives."""
        km = self.kernel_manager
        process = kernel_process(kernel)
        silent = 0.0
        while True:
            await asyncio.sleep(self.liveness_interval)
            if kernel_id not in km or km.get_kernel(kernel_id) is not kernel:
                return "was shut down"
            if kernel_process(kernel) != process:
                return "was restarted (a new process on new ports)"
            try:
                alive = await kernel.is_alive()
            except Exception:  # a provisioner that cannot tell: the other signs still count
                alive = True
            if not alive:
                return "died (its process is gone)"
            hb = getattr(client, "hb_channel", None)
            silent = 0.0 if hb is None or hb.is_beating() else silent + self.liveness_interval
            if silent >= self.heartbeat_grace:
                return f"stopped answering its heartbeat for {self.heartbeat_grace:.0f} s"

    def _answer_json(self, kernel, label: str, reply) -> dict:
        answer = reply["content"].get("user_expressions", {}).get("gkews", {})
        if answer.get("status") != "ok":
            if answer.get("ename") in ("ModuleNotFoundError", "ImportError"):
                raise KernelStateMissing(
                    f"the kernel of {label} ({kernel.kernel_name}) cannot import kernel_state: "
                    f"install jupyter-gkews in that kernel's environment")
            raise KernelCallError(f"kernel_state failed in {label}: {answer.get('ename')}: {answer.get('evalue')}",
                                  kind=answer.get("ename"))
        result = answer["data"].get("application/json")
        if result is None:  # a kernel_state older than this server: no answer(), or no JSON display
            raise KernelCallError(f"the kernel of {label} answered without JSON; "
                                  "install the same jupyter-gkews in that kernel's environment")
        return result

    async def _restore_activity(self, kernel, before) -> None:
        if ignores_our_activity(kernel):
            # our messages never counted, so whatever activity the kernel shows now is its user's: a cell run
            # behind our call, ended meanwhile, must not be turned back into idle time (an idle pause came
            # right after it)
            return
        last, server_last = before
        # The server's activity tracker reads IOPub on its own socket and may not have seen our call's
        # final "idle" yet; that late message would stamp the kernel active. Wait for it first.
        for _ in range(40):
            if getattr(kernel, "execution_state", "idle") != "busy":
                break
            await asyncio.sleep(0.05)
        if last is not None and getattr(kernel, "execution_state", "idle") != "busy":
            kernel.last_activity = last
        if server_last is not None:
            # what the users did meanwhile in other kernels still counts
            others = [getattr(self.kernel_manager.get_kernel(k), "last_activity", None)
                      for k in self.kernel_manager.list_kernel_ids()]
            self.kernel_manager.last_kernel_activity = max([server_last] + [t for t in others if t])


def ignores_our_activity(kernel) -> bool:
    stream = getattr(kernel, "_activity_stream", None)
    return bool(getattr(getattr(stream, "_recv_callback", None), "gkews_ignores_bridge", False))


def _ignore_our_activity(kernel, km) -> None:
    """Wrap the server's activity tracker of this kernel (once per IOPub stream: a restart makes a new
    one): a message whose parent came from one of our sessions still updates the execution state, but
    not the activity times. Where the tracker is not the one we know, _restore_activity still applies."""
    stream = getattr(kernel, "_activity_stream", None)
    record = getattr(stream, "_recv_callback", None)
    if record is None or ignores_our_activity(kernel):
        return

    def record_unless_ours(msg_list):
        try:
            _idents, frames = kernel.session.feed_identities(msg_list)
            parent = kernel.session.unpack(frames[2])  # [signature, header, parent_header, ...]
            ours = str(parent.get("session", "")).startswith(BRIDGE_SESSION)
            if not ours and kernel.session.unpack(frames[1]).get("msg_type") == "execute_input":
                kernel.gkews_cell_started = datetime.now(timezone.utc)  # a user's cell starts running
        except Exception:  # not a message we can read: the tracker decides, as without us
            ours = False
        if not ours:
            return record(msg_list)
        times = kernel.last_activity, km.last_kernel_activity
        try:
            return record(msg_list)
        finally:
            kernel.last_activity, km.last_kernel_activity = times

    record_unless_ours.gkews_ignores_bridge = True
    stream.on_recv(record_unless_ours)


#: one call at a time through a hold's files (a rename's call during the resume's restore took its answer)
_HELD_CALLS: dict[str, asyncio.Lock] = {}


async def call_held(hold_file: str, pid: int, request: dict, timeout: float) -> dict | None:
    """Ask the kernel pid, held at hold_file, through the files beside its hold (kernel_state.hold): its
    answer (kernel_state.api's JSON), or None when it left the hold without taking the call."""
    async with _HELD_CALLS.setdefault(hold_file, asyncio.Lock()):
        if held_pid(hold_file) != pid:  # let go while another call was answered: ask it as it runs
            return None
        return await _call_held(hold_file, pid, request, timeout)


async def _call_held(hold_file: str, pid: int, request: dict, timeout: float) -> dict | None:
    call_id = uuid.uuid4().hex
    call_path, answer_path = hold_file + CALL_SUFFIX, hold_file + ANSWER_SUFFIX
    _remove(answer_path)  # one a call that gave up left behind
    with open(call_path + ".partial", "w") as f:
        json.dump({"id": call_id, "request": request}, f)
    os.replace(call_path + ".partial", call_path)
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        while True:
            answer = _take_answer(answer_path, call_id)
            if answer is not None:
                return answer
            if held_pid(hold_file) != pid:  # it left the hold: it answered just before, or never will
                return _take_answer(answer_path, call_id)
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError
            await asyncio.sleep(0.05)
    finally:
        _remove(call_path)


async def _shell_reply(client, msg_id: str) -> dict:
    """The kernel's reply to the request msg_id (replies to other requests of this client are dropped)."""
    while True:
        try:
            reply = await client.get_shell_msg(timeout=1)
        except queue.Empty:
            continue
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def _result(payload: dict) -> dict:
    """kernel_state.api's answer: its result, or its error raised."""
    if not payload["ok"]:
        raise KernelCallError(payload["error"], kind=payload.get("type"))
    return payload["result"]


def _take_answer(path: str, call_id: str) -> dict | None:
    """The held kernel's answer to call_id, once it is there (a stale one is dropped)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    _remove(path)
    return data["answer"] if data.get("id") == call_id else None


def kernel_pid(kernel) -> int | None:
    """The kernel's process: its provisioner's pid, or the one an adopted kernel was given (gpu_suspend)."""
    provisioner = getattr(kernel, "provisioner", None)
    return getattr(provisioner, "pid", None) or getattr(kernel, "gkews_pid", None)


def _expression(module: str, function: str, *args) -> str:
    return f"__import__('kernel_state.{module}').{module}.{function}({', '.join(json.dumps(a) for a in args)})"


def _progress_hook(on_progress):
    def hook(msg):
        if on_progress and msg["msg_type"] == "stream":
            for line in msg["content"]["text"].splitlines():
                found = _marked(line, PROGRESS_LINE)
                if found is not None and isinstance(found.get("gkews_progress"), dict):
                    on_progress(found["gkews_progress"])
    return hook


def _marked(line: str, marker: str) -> dict | None:
    """The JSON object starting at marker in a line of the kernel's output, or None. A thread of the notebook
    may print on the same line, before or after it; a line it cut short is no answer (a progress line is
    skipped; a save's answer still comes back in its reply)."""
    at = line.find(marker)
    if at < 0:
        return None
    try:
        found = json.JSONDecoder().raw_decode(line, at)[0]
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def kernel_process(kernel):
    """What changes when a kernel restarts: its process id and its ports."""
    provisioner = getattr(kernel, "provisioner", None)
    return (getattr(provisioner, "pid", None), getattr(kernel, "shell_port", None),
            getattr(kernel, "hb_port", None))


def kernel_identity(km, kernel_id: str) -> dict | None:
    """A kernel's process as the state file keeps it: its pid and start time (a pid alone is reused)."""
    from .gpu_suspend.procs import start_time
    pid = kernel_pid(km.get_kernel(kernel_id)) if kernel_id in km else None
    return {"pid": pid, "start": start_time(pid)} if pid else None


def kernel_leaving(km, kernel_id: str) -> bool:
    """Is the kernel gone, or on its way out (DELETE api/kernels, Shut Down Kernel)? jupyter_client interrupts
    a kernel before it asks it to shut down, so a call into it can fail with KeyboardInterrupt while the kernel
    is still listed; a restart also shuts down first, but stays listed and is not queued for removal."""
    if kernel_id not in km:
        return True
    removing = kernel_id in getattr(km, "_pending_kernels", {})
    return removing and getattr(km.get_kernel(kernel_id), "shutting_down", False)


def hold_file(runtime_dir: str, kernel_id: str) -> str:
    """While this file exists, the kernel held after its pause checkpoint runs nothing else (the kernel
    finds its own by the same name: kernel_state.hold.hold_path)."""
    return hold_path(runtime_dir, kernel_id)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
