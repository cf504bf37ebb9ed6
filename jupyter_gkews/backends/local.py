"""The embedded default: no cluster, no Pod snapshot.

Release (after the application checkpoints) either suspends the kernels' GPU state in place or shuts the
kernels down (c.LocalBackend.release_mode):

- suspend: each kernel process (and each child) that holds a CUDA context is locked and checkpointed by
  NVIDIA's driver: its device memory moves to host memory and the GPU is free, while the process lives on
  with everything in it. Resume waits until the GPU has room again, restores and unlocks it, and the
  lifecycle verifies it (live-verified). Kernels without a CUDA context are left running.
- shutdown: the kernels stop, which frees their GPU memory and RAM while the server stays up; resume starts a
  kernel for the same notebook (same session id and kernel id, so the session table and reconnecting clients
  find it again) and the lifecycle restores it from its checkpoint.
- auto (default): suspend when the driver API and NVML work and the host has the memory, else shutdown.

Whenever the suspend or its restore cannot be used for a kernel, that kernel falls back to the shutdown path
and its checkpoint, with the reason in its per-notebook message.
"""
from __future__ import annotations

import asyncio
import os
import time

from jupyter_core.utils import ensure_async
from traitlets import CaselessStrEnum, Float, Int, validate

from kernel_state.fsutil import remove_quietly
from kernel_state.hold import START as HOLD_AT_START, held_pid

from ..bridge import hold_file, kernel_pid
from ..kernelready import kernel_ready, own_client
from ..gpu_suspend import GIB, DriverError, GpuUnavailable, gib, keepalive, procs
from ..gpu_suspend.driver import refusal
from ..lifecycle.paths import one_line, session_path
from ..states import NotebookStatus, State
from .base import KEPT_RUNNING, LIVE_STATUSES, SUSPENDED, Backend, in_range

RELEASED_MESSAGE = "released (checkpoint on disk)"
#: what NVML may still show for a suspended process: the driver may keep a few MiB of its own (4 MiB measured
#: on an H200 with driver 580); more than this means the memory did not move
RESIDUE = 64 * 1024 ** 2


class LocalBackend(Backend):
    name = "local"

    release_mode = CaselessStrEnum(
        ("auto", "suspend", "shutdown"), "auto", config=True,
        help="What a pause does with each kernel after its checkpoint. suspend: NVIDIA's driver moves the GPU "
        "state of the kernel (and of its children holding a CUDA context) to host memory and frees the GPU; the "
        "process lives on and resumes live-verified. shutdown: the kernel stops; resume restores a fresh one "
        "from the checkpoint. auto: suspend when the driver supports it and the host has the memory, else "
        "shutdown. Needs the gpu extra (pip install \"jupyter-gkews[gpu]\") for suspend.")
    gpu_api = CaselessStrEnum(
        ("nvidia", "fake"), "nvidia", config=True,
        help="nvidia: the driver through cuda-bindings and NVML through nvidia-ml-py. fake: a simulated GPU in "
        "the JSON file $GKEWS_FAKE_GPU (tests and benchmark smoke runs on machines without a GPU).")
    capacity_timeout = Float(
        600.0, config=True,
        help="Seconds a resume waits for the GPU to have room for the suspended kernels' memory (while another "
        "process holds it). Then the kernels that do not fit are restarted from their checkpoints.")
    capacity_poll_interval = Float(2.0, config=True, help="Seconds between two looks at the GPU's free memory.")
    lock_timeout = Float(
        300.0, config=True,
        help="Seconds the driver waits for a kernel's running GPU work to finish before a suspend gives up "
        "(that kernel is then shut down).")
    release_check_timeout = Float(
        30.0, config=True, help="Seconds to wait for NVML to show a suspended process's device memory freed.")
    dead_kernel_wait = Float(
        10.0, config=True,
        help="Seconds a resume waits for the server's restarter to bring back a notebook's kernel it finds dead "
        "(killed during an earlier resume); then it restarts the kernel itself.")
    start_hold_wait = Float(
        60.0, config=True,
        help="Seconds a resume waits for a kernel it started to enter its start hold (so that no cell runs in it "
        "before its restore); a kernel that does not by then is restored into as it runs.")
    host_memory_reserve = Int(
        2 * GIB, config=True,
        help="Bytes of host memory (MemAvailable) a suspend leaves free; a kernel whose GPU memory does not fit "
        "in the rest is shut down instead.")

    @validate("capacity_timeout", "release_check_timeout", "dead_kernel_wait", "host_memory_reserve", "start_hold_wait")
    def _at_least_zero(self, proposal):
        return in_range(proposal, 0)

    @validate("capacity_poll_interval")
    def _more_than_zero(self, proposal):
        return in_range(proposal, 0, strict=True)

    @validate("lock_timeout")
    def _at_least_a_millisecond(self, proposal):  # the driver's lock takes milliseconds, and 0 means no limit
        return in_range(proposal, 0.001)

    _gpu = None  # (driver, memory), opened on first use

    # -- the GPU -------------------------------------------------------------------------------------
    def _open_gpu(self):
        """Blocking: the driver and NVML, or GpuUnavailable saying why not."""
        if self._gpu is None:
            if self.gpu_api == "fake":
                from ..gpu_suspend.fake import FakeGpu
                fake = FakeGpu()
                self._gpu = (fake, fake)
            else:
                from ..gpu_suspend.driver import CudaCheckpointDriver
                from ..gpu_suspend.nvml import NvmlMemory
                self._gpu = (CudaCheckpointDriver(), NvmlMemory())
        return self._gpu

    def _gpus_here(self) -> bool:
        """Whether this session holds a GPU (c.GkewsApp.gpu_count, detected by default)."""
        lifecycle = getattr(self.parent, "lifecycle", None)
        return bool(getattr(lifecycle, "gpu_count", 1))

    def _say(self, message: str) -> None:
        self.log.info("gkews: %s", one_line(message))
        lifecycle = getattr(self.parent, "lifecycle", None)
        if lifecycle is not None:
            lifecycle.note(message)

    # -- pause ---------------------------------------------------------------------------------------
    async def release(self, notebooks: list[dict]) -> dict:
        """Suspend or shut down each notebook's kernel; per path: its status, message and suspend record."""
        km = self.serverapp.kernel_manager
        kernels = {nb["path"]: (km.get_kernel(nb["kernel_id"]) if nb["kernel_id"] in km else None) for nb in notebooks}
        pids = {path: kernel_pid(k) if k is not None else None for path, k in kernels.items()}
        if self.release_mode == "shutdown":
            plan = {nb["path"]: ("shutdown", "") for nb in notebooks}
        else:
            plan = await asyncio.to_thread(self._plan, notebooks, pids)
        results: dict[str, dict] = {}
        for nb in notebooks:
            kind, detail = plan[nb["path"]]
            if kind != "shutdown":
                kernel = kernels[nb["path"]]
                if not await keepalive.detach(kernel, hold_file(self.serverapp.runtime_dir, nb["kernel_id"])):
                    plan[nb["path"]] = kind, detail = ("shutdown", "the kernel did not answer the detach request")
            if kind == "suspend":
                started = time.monotonic()
                why = await asyncio.to_thread(self._suspend, detail)
                if why:
                    plan[nb["path"]] = kind, detail = ("shutdown", why)
                else:
                    detail["seconds"] = round(time.monotonic() - started, 3)
            if kind == "shutdown":
                message = RELEASED_MESSAGE + (f"; not suspended: {detail}" if detail else "")
                results[nb["path"]] = {"status": NotebookStatus.RELEASED, "message": message, "gpu": None}
                if detail and self.release_mode == "suspend":
                    self.log.warning("gkews: %s", one_line(f"{nb['path']}: {message}"))
                continue
            record = {"kernel_pid": pids[nb["path"]], "kernel_start": procs.start_time(pids[nb["path"]]),
                      "connection_file": kernels[nb["path"]].connection_file, **(detail or {})}
            self._watch_death(kernels[nb["path"]], nb["kernel_id"], pids[nb["path"]])
            if kind == "suspend":
                results[nb["path"]] = {"status": SUSPENDED, "gpu": record,
                                       "message": f"suspended in host memory ({gib(record['bytes'])})"}
            else:
                results[nb["path"]] = {"status": KEPT_RUNNING, "gpu": record,
                                       "message": "kept in memory: it holds no CUDA context, nothing to release; "
                                                  "its cells wait until the resume"}
        # all at once: each shutdown waits for its process to exit
        await asyncio.gather(*(km.shutdown_kernel(nb["kernel_id"]) for nb in notebooks
                               if plan[nb["path"]][0] == "shutdown" and nb["kernel_id"] in km))
        return results

    def _watch_death(self, kernel, kernel_id: str, pid: int) -> None:
        """A kernel that lives on while paused can still die (the OOM killer: its GPU memory now sits in host
        memory). Jupyter's restarter then starts a new, empty kernel under the same id, which nothing holds:
        say so at once, and let the resume restore the checkpoint into that kernel (start_kernel) rather
        than replace it and what ran in it meanwhile."""
        def died():
            kernel.remove_restart_callback(died, "restart")
            lifecycle = getattr(self.parent, "lifecycle", None)
            for nb in lifecycle.state["notebooks"] if lifecycle is not None else []:
                if nb.get("kernel_id") == kernel_id and nb.get("status") in LIVE_STATUSES:
                    nb["gpu_fallback"] = f"its kernel process {pid} died while paused"
                    nb["message"] = (f"its kernel process {pid} died while paused; Jupyter started a new kernel in "
                                     "its place, and resume restores the checkpoint into it")
                    self._say(f"paused; {nb['path']}: {nb['message']}")
        kernel.add_restart_callback(died, "restart")

    def _plan(self, notebooks: list[dict], pids: dict) -> dict:
        """Blocking: per path ("suspend", {held processes}), ("keep", None) or ("shutdown", why)."""
        try:
            _, memory = self._open_gpu()
            on_gpu = memory.processes()
        except GpuUnavailable as exc:
            if self.release_mode == "auto" and not self._gpus_here():
                # a laptop or a CPU-only server: nothing to suspend, and advice to install the GPU extra is noise
                self.log.info("gkews: no GPU in this session: the kernels are shut down (%s)", exc)
                return {nb["path"]: ("shutdown", "") for nb in notebooks}
            why = f"GPU suspend is not available: {exc}"
            log = self.log.warning if self.release_mode == "suspend" else self.log.info
            log("gkews: %s; the kernels are shut down (release_mode=%s)", why, self.release_mode)
            return {nb["path"]: ("shutdown", why) for nb in notebooks}
        budget = procs.mem_available() - self.host_memory_reserve
        plan = {}
        for nb in notebooks:
            pid = pids[nb["path"]]
            if pid is None:
                plan[nb["path"]] = ("shutdown", "the server does not know this kernel's process id")
                continue
            family = set(procs.tree(pid))
            held = [{"pid": p.pid, "device": p.device, "bytes": p.used, "start": procs.start_time(p.pid)}
                    for p in on_gpu if p.pid in family]
            if not held:
                plan[nb["path"]] = ("keep", None)
                continue
            total = sum(h["bytes"] for h in held)
            if total > budget:
                plan[nb["path"]] = ("shutdown", f"the host has {gib(max(budget, 0))} of memory to spare "
                                    f"(MemAvailable less {gib(self.host_memory_reserve)}), this kernel holds "
                                    f"{gib(total)} on the GPU")
                continue
            budget -= total
            plan[nb["path"]] = ("suspend", {"held": held, "bytes": total})
        return plan

    def _suspend(self, detail: dict) -> str | None:
        """Blocking: lock and checkpoint each process, then check with NVML that its memory is free. None when
        it worked, else why not (the caller shuts the kernel down: its checkpoint is on disk)."""
        driver, memory = self._open_gpu()
        pids = sorted({h["pid"] for h in detail["held"]})
        try:
            for pid in pids:
                driver.lock(pid, self.lock_timeout)
            for pid in pids:
                driver.checkpoint(pid)
        except DriverError as exc:
            return refusal(exc) or f"the driver could not suspend it: {exc}"
        except GpuUnavailable as exc:
            return str(exc)
        deadline = time.monotonic() + self.release_check_timeout
        while True:
            try:
                still = [p for p in memory.processes() if p.pid in pids and p.used > RESIDUE]
            except GpuUnavailable as exc:
                return f"its release could not be checked: {exc}"
            if not still:
                return None
            if time.monotonic() > deadline:
                return (f"NVML still shows {', '.join(f'pid {p.pid} holding {gib(p.used)}' for p in still)} "
                        f"{self.release_check_timeout:.0f} s after the checkpoint")
            time.sleep(0.5)

    # -- resume --------------------------------------------------------------------------------------
    async def acquire(self, notebooks: list[dict]) -> None:
        """Wait until the GPU has room for every suspended kernel's memory, saying who holds it; after
        capacity_timeout, the kernels that do not fit are marked to restart from their checkpoints."""
        waiting = [nb for nb in notebooks if nb.get("status") == SUSPENDED and nb.get("gpu")
                   and not nb.get("gpu_fallback")]
        if not waiting:
            return
        try:
            _, memory = await asyncio.to_thread(self._open_gpu)
        except GpuUnavailable as exc:
            for nb in waiting:
                nb["gpu_fallback"] = f"the GPU cannot be reached to restore it: {exc}"
            return
        deadline = time.monotonic() + self.capacity_timeout
        while True:
            try:
                free, on_gpu = await asyncio.to_thread(lambda: (memory.free(), memory.processes()))
            except GpuUnavailable as exc:
                for nb in waiting:
                    nb["gpu_fallback"] = f"the GPU's free memory cannot be read to restore it: {exc}"
                return
            short = _shortfall(waiting, free)
            if not short:
                return
            ours = {h["pid"] for nb in waiting for h in nb["gpu"]["held"]}
            holders = await asyncio.to_thread(_describe_holders, [p for p in on_gpu if p.pid not in ours])
            need = ", ".join(f"GPU {d} needs {gib(n)} more" for d, n in sorted(short.items()))
            left = deadline - time.monotonic()
            if left <= 0:
                for nb in _without_room(waiting, free):
                    nb["gpu_fallback"] = (f"the GPU stayed taken for {self.capacity_timeout:.0f} s ({need}; "
                                          f"held by {holders})")
                return
            for nb in waiting:
                nb["message"] = f"waiting for capacity: {need}; held by {holders}"
            self._say(f"waiting for capacity: {need} to restore the suspended kernels; held by {holders}; "
                      f"restarting them from their checkpoints in {left:.0f} s otherwise")
            await asyncio.sleep(min(self.capacity_poll_interval, max(left, 0.05)))

    async def start_kernel(self, notebook: dict) -> str:
        km = self.serverapp.kernel_manager
        notebook.pop("message", None)  # what the pause said ("suspended in host memory") is over
        if notebook.get("status") in LIVE_STATUSES and notebook.get("gpu"):
            why = notebook.pop("gpu_fallback", None) or await self._bring_back(notebook)
            if why is None:
                kernel = km.get_kernel(notebook["kernel_id"])
                if held_pid(hold_file(self.serverapp.runtime_dir, notebook["kernel_id"])) != kernel_pid(kernel):
                    # not in its hold (whose end watches the server again): it runs requests, ask it
                    await keepalive.run_expression(kernel, keepalive.attach_expression(os.getpid()))
                return await self._bind_session(notebook, notebook["kernel_id"])
            self.log.warning("gkews: %s; restarting it from its checkpoint", one_line(f"{notebook['path']}: {why}"))
            notebook["fallback"] = why
            await self._kill(notebook, keep_kernel=self._replaced_meanwhile(notebook))
        notebook.pop("gpu", None)
        reopened = await self._open_session(notebook["path"])
        if reopened is not None:  # its user opened it again while paused: restore into that kernel
            notebook.update(session_id=reopened["id"], reopened=reopened["kernel"]["id"] != notebook["kernel_id"])
            return await self._alive(reopened["kernel"]["id"])
        kernel_id = notebook["kernel_id"]
        started = kernel_id not in km
        if not started:
            await self._alive(kernel_id)
        else:
            # held from its start until the resume has restored into it (kernel_state.hold.hold_at_start)
            held = hold_file(self.serverapp.runtime_dir, kernel_id)
            with open(held, "w") as f:
                f.write(HOLD_AT_START)
            try:
                kernel_id = await self.serverapp.session_manager.start_kernel_for_session(
                    notebook["session_id"], notebook["path"], notebook["name"], notebook["type"],
                    notebook["kernel_name"], kernel_id=kernel_id)
            except BaseException:
                remove_quietly(held)
                raise
            await self._until_held(kernel_id, held)
        try:
            return await self._bind_session(notebook, kernel_id)
        except BaseException:
            if started:  # never leave a kernel running that no session shows
                await km.shutdown_kernel(kernel_id)
            raise

    async def _until_held(self, kernel_id: str, path: str) -> None:
        """Wait until the kernel just started is in its hold (it signs the hold file with its pid), so that the
        resume's calls go through the hold and no cell runs before them. A kernel that died, or that answers
        requests unsigned, is not waited for: the hold file goes, and it starts as it would. A held kernel
        answers nothing (it holds while loading its extensions), so an answer means that its IPython does not
        load kernel_state as an extension (a profile's own `c.IPKernelApp.extensions` replaces ours)."""
        km = self.serverapp.kernel_manager
        deadline = time.monotonic() + self.start_hold_wait
        answers = asyncio.ensure_future(self._answers(km.get_kernel(kernel_id)))
        try:
            while time.monotonic() < deadline and kernel_id in km:
                kernel = km.get_kernel(kernel_id)
                if held_pid(path) == kernel_pid(kernel):
                    return
                if not await ensure_async(kernel.is_alive()):
                    remove_quietly(path)
                    return
                if answers.done() and answers.result() and held_pid(path) != kernel_pid(kernel):
                    self.log.warning("gkews: the kernel of %s runs without its start hold: its IPython does not "
                                     "load kernel_state as an extension (add it to c.IPKernelApp.extensions); "
                                     "restoring into it as it runs", kernel_id)
                    break
                await asyncio.sleep(0.05)
            else:
                self.log.warning("gkews: the kernel of %s did not enter its start hold within %.0f s; restoring "
                                 "into it as it runs", kernel_id, self.start_hold_wait)
        finally:
            answers.cancel()
        remove_quietly(path)  # a kernel reading it now finds none, or cannot sign it, and starts as usual

    async def _answers(self, kernel) -> bool:
        """Whether the kernel answers a kernel_info request (within start_hold_wait)."""
        client = own_client(kernel, prefix="gkews-start-")
        client.start_channels()
        try:
            await kernel_ready(client, timeout=self.start_hold_wait)
            return True
        except RuntimeError:
            return False
        finally:
            client.stop_channels()

    async def _alive(self, kernel_id: str) -> str:
        """A kernel found dead (killed during the last resume, say) is alive again before anything is restored
        into it: the server's restarter brings it back within seconds; one still dead then is restarted here."""
        km = self.serverapp.kernel_manager
        deadline = time.monotonic() + self.dead_kernel_wait
        while kernel_id in km and not await ensure_async(km.get_kernel(kernel_id).is_alive()):
            if time.monotonic() >= deadline:
                self.log.warning("gkews: kernel %s is dead; restarting it to restore into it", kernel_id)
                await km.restart_kernel(kernel_id)
                break
            await asyncio.sleep(0.2)
        return kernel_id

    async def _bind_session(self, notebook: dict, kernel_id: str) -> str:
        """The notebook's session, and those that shared its kernel (a console for it), on kernel_id."""
        sm = self.serverapp.session_manager
        sessions = await sm.list_sessions()
        live = {s["id"] for s in sessions}  # by id too: a client may have spelled it `/a.ipynb`
        for session in [notebook, *notebook.get("companions", [])]:
            if session["session_id"] in live:
                await sm.update_session(session["session_id"], kernel_id=kernel_id)
                continue
            opened = next((s for s in sessions if session_path(s["path"]) == session["path"]), None)
            if opened is not None:  # opened again after a server restart: a new session, with a kernel of its own
                await self._take_over(opened, kernel_id, sessions)
                session["session_id"] = opened["id"]
            else:  # the session table dropped it when its kernel stopped: put it back under its old id
                await sm.save_session(session["session_id"], path=session["path"], name=session["name"],
                                      type=session["type"], kernel_id=kernel_id)
        return kernel_id

    async def _take_over(self, opened: dict, kernel_id: str, sessions: list[dict]) -> None:
        """A session the page opened for a paused notebook after a server restart (the table had lost the
        notebook's own) goes to the kernel that comes back live, and the kernel it started goes: it ran
        nothing of the notebook's (the page holds a paused notebook's cells), and left running it would be a
        second kernel that no session shows."""
        km = self.serverapp.kernel_manager
        started = (opened.get("kernel") or {}).get("id")
        await self.serverapp.session_manager.update_session(opened["id"], kernel_id=kernel_id)
        others = [s for s in sessions if s["id"] != opened["id"] and (s.get("kernel") or {}).get("id") == started]
        if started and started != kernel_id and started in km and not others:
            self.log.info("gkews: %s opened again after the restart: its session now has the resumed kernel %s; "
                          "shutting down the kernel it had started (%s)", opened["path"], kernel_id, started)
            await km.shutdown_kernel(started)

    async def _open_session(self, path: str) -> dict | None:
        """The session with a running kernel that the notebook at path has now, if any."""
        km = self.serverapp.kernel_manager
        for session in await self.serverapp.session_manager.list_sessions():
            kernel = session.get("kernel") or {}
            if session_path(session["path"]) == path and kernel.get("id") in km:
                return session
        return None

    async def _bring_back(self, nb: dict) -> str | None:
        """Make the kernel usable again: adopt it when a restarted server does not know it, then restore and
        unlock its processes. None when it worked, else why it cannot (the caller falls back)."""
        gpu = nb["gpu"]
        if not procs.same_process(gpu["kernel_pid"], gpu["kernel_start"]):
            return f"its kernel process {gpu['kernel_pid']} is gone"
        km = self.serverapp.kernel_manager
        if nb["kernel_id"] not in km:
            try:
                keepalive.adopt(km, nb["kernel_id"], gpu["connection_file"], nb["kernel_name"], gpu["kernel_pid"])
            except Exception as exc:
                return f"the restarted server could not reconnect to its kernel: {type(exc).__name__}: {exc}"
        if nb.get("status") != SUSPENDED:
            return None
        return await asyncio.to_thread(self._restore, gpu)

    def _restore(self, gpu: dict) -> str | None:
        """Blocking. Never retries a failed restore: on this driver a restore that failed once leaves the
        process unusable, so the kernel falls back to its checkpoint instead."""
        try:
            driver, memory = self._open_gpu()
            for h in gpu["held"]:
                if not procs.same_process(h["pid"], h["start"]):
                    return f"its GPU process {h['pid']} is gone"
            todo = [h for h in gpu["held"] if driver.state(h["pid"]) == "checkpointed"]
            short = _shortfall([{"gpu": {"held": todo}}], memory.free())
            if short:  # taken since the wait: a restore now would fail for memory, and for good
                return ("the GPU is full again: " + ", ".join(f"GPU {d} needs {gib(n)} more" for d, n in short.items()))
            for pid in sorted({h["pid"] for h in todo}):
                driver.restore(pid)
            for pid in sorted({h["pid"] for h in gpu["held"]}):
                if driver.state(pid) == "locked":
                    driver.unlock(pid)
        except DriverError as exc:
            return refusal(exc) or f"the driver could not restore its GPU state: {exc}"
        except GpuUnavailable as exc:
            return f"the GPU cannot be reached to restore it: {exc}"
        return None

    async def _kill(self, nb: dict, keep_kernel: bool = False) -> None:
        """Stop a kernel that cannot come back live, whoever started it; its checkpoint brings it back.
        keep_kernel: the kernel under its id is the restarter's new one; only the old processes go."""
        gpu = nb.get("gpu") or {}
        for pid, start in [(gpu.get("kernel_pid"), gpu.get("kernel_start"))] + \
                [(h["pid"], h["start"]) for h in gpu.get("held", [])]:
            if pid and procs.same_process(pid, start):
                keepalive.kill(pid)
        km = self.serverapp.kernel_manager
        if nb["kernel_id"] in km and not keep_kernel:
            await km.shutdown_kernel(nb["kernel_id"], now=True)

    def _replaced_meanwhile(self, nb: dict) -> bool:
        """Whether the kernel under the notebook's id is a new process the restarter started (its suspended
        one died while paused): cells its user ran there since are kept, the checkpoint is restored into it."""
        km = self.serverapp.kernel_manager
        pid = kernel_pid(km.get_kernel(nb["kernel_id"])) if nb["kernel_id"] in km else None
        return bool(pid) and pid != (nb.get("gpu") or {}).get("kernel_pid") and procs.same_process(pid, None)

    # -- server start and stop --------------------------------------------------------------------------
    async def recover_paused(self, lifecycle, found: str = State.PAUSED) -> None:
        if found == State.PAUSING:  # the roll-forward's message says what became of each notebook
            return
        live = [nb for nb in lifecycle.state["notebooks"] if nb.get("status") in LIVE_STATUSES and nb.get("gpu")]
        km = self.serverapp.kernel_manager
        gone = []
        for nb in live:
            gpu = nb["gpu"]
            if not procs.same_process(gpu["kernel_pid"], gpu["kernel_start"]):
                nb["gpu_fallback"] = f"its kernel process {gpu['kernel_pid']} is gone (the server restarted meanwhile)"
                gone.append(nb["path"])
            elif nb["kernel_id"] not in km:
                try:
                    keepalive.adopt(km, nb["kernel_id"], gpu["connection_file"], nb["kernel_name"], gpu["kernel_pid"])
                except Exception as exc:
                    nb["gpu_fallback"] = f"the restarted server could not reconnect to its kernel: {exc}"
                    gone.append(nb["path"])
        if found == State.RESUMING:  # rolled back: the kernels it had restarted stopped with it
            stopped = [nb["path"] for nb in lifecycle.state["notebooks"]
                       if nb.get("status") == NotebookStatus.RELEASED] + gone
            back = [nb["path"] for nb in live if nb["path"] not in gone]
            if back:
                lifecycle.note("the server stopped during a resume; resume again: it brings "
                               f"{', '.join(back)} back live (still suspended or running)"
                               + (f" and restores {', '.join(stopped)} from their checkpoints" if stopped else ""))
            return
        if not live:
            lifecycle.note("paused; the kernels are stopped: resume to restore them from their checkpoints")
            return
        message = (f"paused; {len(live) - len(gone)} kernel(s) still suspended or running: resume brings them "
                   "back live")
        if gone:
            message += f"; gone, resume restores them from their checkpoints: {', '.join(gone)}"
        lifecycle.note(message)

    async def server_stopping(self, lifecycle) -> None:
        """Leave suspended kernels alive: forget them, so the stopping server does not shut them down."""
        km = self.serverapp.kernel_manager
        for nb in lifecycle.state.get("notebooks", []):
            if nb.get("status") in LIVE_STATUSES and nb.get("gpu"):
                keepalive.forget(km, nb["kernel_id"])


def _shortfall(notebooks: list[dict], free: dict[int, int]) -> dict[int, int]:
    """Bytes missing per device for all these notebooks' suspended memory to fit."""
    need: dict[int, int] = {}
    for nb in notebooks:
        for h in nb["gpu"]["held"]:
            need[h["device"]] = need.get(h["device"], 0) + h["bytes"]
    return {d: n - free.get(d, 0) for d, n in need.items() if n > free.get(d, 0)}


def _without_room(notebooks: list[dict], free: dict[int, int]) -> list[dict]:
    """Those that do not fit after the ones before them took their room (in order)."""
    left, out = dict(free), []
    for nb in notebooks:
        if _shortfall([nb], left):
            out.append(nb)
            continue
        for h in nb["gpu"]["held"]:
            left[h["device"]] = left.get(h["device"], 0) - h["bytes"]
    return out


def _describe_holders(on_gpu) -> str:
    if not on_gpu:
        return "no process NVML can see (another container or VM)"
    parts = []
    for p in sorted(on_gpu, key=lambda p: -p.used):
        user = procs.user_of(p.pid)
        parts.append(f"pid {p.pid}" + (f" ({user}, {gib(p.used)})" if user else f" ({gib(p.used)})")
                     + f" on GPU {p.device}")
    return ", ".join(parts)
