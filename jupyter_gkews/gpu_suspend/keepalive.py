"""Keep a suspended kernel alive across a server restart, and take it back afterwards.

A kernel normally dies with its server: ipykernel's parent poller exits the kernel once its parent process
changes, and a stopping server shuts its kernels down. A suspended kernel is the only copy of its live state
(the application checkpoint is the fallback), so while paused it is detached: the poller is told to ignore
its parent, and a stopping server forgets it instead of shutting it down. A new server adopts it again
from its connection file; its pid and start time in the state file say whether it is still the same process.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from kernel_state.hold import DETACH_SUFFIX

from ..kernelready import kernel_ready, own_client
from .procs import start_time

# run inside the kernel as a user expression: pure Python, so it works while CUDA calls are locked
_APP = "__import__('ipykernel.kernelapp', fromlist=['IPKernelApp']).IPKernelApp.instance()"
DETACH = "__import__('kernel_state.hold', fromlist=['detach_from_parent']).detach_from_parent()"


async def detach(kernel, hold_file: str, timeout: float = 30.0) -> bool:
    """Detach the kernel from this server (see kernel_state.hold.detach_from_parent); True when done. A
    kernel held after its pause checkpoint runs no request: it is asked through a file beside its hold."""
    if not os.path.exists(hold_file):
        return await run_expression(kernel, DETACH, timeout)
    marker = hold_file + DETACH_SUFFIX
    with open(marker, "w"):
        pass
    deadline = asyncio.get_running_loop().time() + timeout
    while os.path.exists(marker):
        if asyncio.get_running_loop().time() > deadline or not os.path.exists(hold_file):
            with contextlib.suppress(FileNotFoundError):
                os.remove(marker)
            return False
        await asyncio.sleep(0.05)
    return True


def attach_expression(server_pid: int) -> str:
    """Watch the server again, when it is still the kernel's parent (not after an adoption)."""
    return (f"(lambda app, os: setattr(app.poller, 'parent_pid', {server_pid}) if getattr(app, 'poller', None) "
            f"is not None and os.getppid() == {server_pid} else None)({_APP}, __import__('os'))")


async def run_expression(kernel, expr: str, timeout: float = 30.0) -> bool:
    """Evaluate expr silently in the kernel; True when it ran. The kernel's activity stamp is put back: our
    call is not the user's activity."""
    before = getattr(kernel, "last_activity", None)
    client = own_client(kernel)
    client.start_channels()
    try:
        await kernel_ready(client, timeout=timeout)
        reply = await client.execute_interactive("", silent=True, store_history=False,
                                                 user_expressions={"gkews": expr}, timeout=timeout)
        return reply["content"].get("user_expressions", {}).get("gkews", {}).get("status") == "ok"
    except (TimeoutError, asyncio.TimeoutError, RuntimeError):
        return False
    finally:
        client.stop_channels()
        if before is not None:
            kernel.last_activity = before


def forget(km, kernel_id: str) -> None:
    """Drop a kernel from the server's kernel manager without stopping the process."""
    if kernel_id not in km:
        return
    km.stop_watching_activity(kernel_id)
    km._kernel_connections.pop(kernel_id, None)
    km._kernel_ports.pop(kernel_id, None)
    kernel = km.remove_kernel(kernel_id)
    if kernel is not None:
        kernel.stop_restarter()
        kernel._connection_file_written = False  # else its __del__ removes the file the next server adopts from


def adopt(km, kernel_id: str, connection_file: str, kernel_name: str, pid: int) -> None:
    """Register a running kernel process the server did not start (the previous server did)."""
    from jupyter_server._tz import utcnow

    # kernel_id: the websocket handler looks the kernel up by it (None: 404 "Kernel does not exist")
    kernel = km.kernel_manager_factory(connection_file=connection_file, parent=km, log=km.log,
                                       kernel_name=kernel_name, owns_kernel=False, kernel_id=kernel_id)
    kernel.load_connection_file(connection_file)
    ready = asyncio.get_running_loop().create_future()
    ready.set_result(None)
    kernel._ready = ready  # started long ago: nothing to wait for
    kernel.gkews_pid = pid  # no provisioner knows it: kill and signal go through this pid
    kernel.execution_state, kernel.reason, kernel.last_activity = "idle", "", utcnow()

    async def shutdown_kernel(now: bool = False, restart: bool = False) -> None:
        kill(pid)  # not our child: no provisioner can stop it, its pid can
        if restart:  # Restart Kernel: jupyter_client starts the next process on the same ports, as its own
            await _until_gone(pid)
            for name in OVERRIDDEN:
                kernel.__dict__.pop(name, None)
            # and waits for it as for any start: adopt's ready-made future would be set a second time
            kernel._owns_kernel, kernel.gkews_pid, kernel._ready = True, None, None

    async def interrupt_kernel() -> None:
        os.kill(pid, signal.SIGINT)
    # both names: jupyter_client's restart calls the private one, and a not-owned kernel's stops nothing
    kernel.shutdown_kernel = kernel._async_shutdown_kernel = shutdown_kernel
    kernel.interrupt_kernel = interrupt_kernel
    km._kernels[kernel_id] = kernel
    km._kernel_connections[kernel_id] = 0
    km._kernel_ports[kernel_id] = kernel.ports
    km.start_watching_activity(kernel_id)


OVERRIDDEN = ("shutdown_kernel", "_async_shutdown_kernel", "interrupt_kernel")


async def _until_gone(pid: int, seconds: float = 10.0) -> None:
    """Until a killed process (not our child: no wait()) has let go of its ports, or seconds passed."""
    deadline = asyncio.get_running_loop().time() + seconds
    while start_time(pid) is not None and asyncio.get_running_loop().time() < deadline:  # None: gone, or a zombie
        await asyncio.sleep(0.05)


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
