"""A real `jupyter server` process stopped while its kernels are suspended (simulated GPU, see
tests/test_suspend_fake.py) and started again: the suspended kernels live through it and resume live; one
whose process is gone meanwhile comes back from its checkpoint."""
from __future__ import annotations

import fcntl
import json
import os
import signal
import time

import pytest
from serverproc import Server
from test_lifecycle_restart import alive, kill_pids, wait_gone

from jupyter_gkews.gpu_suspend import fake

pytestmark = pytest.mark.timeout(600)
MIB = 1024 ** 2
CELL = 'import os\nweights = [i * i for i in range(1000)]\nlabel = "live"\nprint(os.getpid())'
CHECK = 'import json; print(json.dumps([sum(weights), label, os.getpid()]))'


class Suspending:
    """A server whose kernels suspend on a simulated GPU, and the kernel processes to kill at the end."""

    def __init__(self, tmp_path, monkeypatch):
        self.gpu_file = str(tmp_path / "fake-gpu.json")
        with fake.edit(self.gpu_file) as data:
            data["devices"] = {"0": 4096 * MIB}
        monkeypatch.setenv(fake.ENV, self.gpu_file)
        self.server = Server(tmp_path)
        self.server.extra_args = ["--LocalBackend.release_mode=suspend", "--LocalBackend.gpu_api=fake",
                                  "--LocalBackend.host_memory_reserve=0"]
        self.pids: list[int] = []

    def open_on_gpu(self, path: str) -> str:
        """A notebook whose kernel holds 1 GiB of the simulated GPU: its kernel id."""
        kid = self.server.open_notebook(path)["kernel"]["id"]
        pid = int(self.server.run_cell(kid, CELL).strip())
        self.pids.append(pid)
        with fake.edit(self.gpu_file) as data:
            data["processes"][str(pid)] = {"device": 0, "bytes": 1024 * MIB, "state": "running"}
        return kid


def killed_after(server, gpu_file: str, route: str, call: list) -> None:
    """POST route, let the simulated driver's calls through one at a time until `call` is done, then kill the
    server (SIGKILL) before the next one."""
    with open(gpu_file + ".lock", "a") as lock:  # the driver's calls wait on it: a transition that takes long
        fcntl.flock(lock, fcntl.LOCK_EX)
        code, _ = server.post(route)
        assert code == 202
        while call not in json.loads(open(gpu_file).read())["calls"]:
            fcntl.flock(lock, fcntl.LOCK_UN)  # one driver call through, then hold it again
            time.sleep(0.005)
            fcntl.flock(lock, fcntl.LOCK_EX)
        server.signal(signal.SIGKILL)


@pytest.fixture
def suspending(tmp_path, monkeypatch):
    setup = Suspending(tmp_path, monkeypatch)
    try:
        yield setup
    finally:
        if setup.server.proc is not None and setup.server.proc.poll() is None:
            setup.server.signal(signal.SIGKILL)
        kill_pids(setup.pids)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["clean-stop", "crash"])
def test_server_restart_while_suspended(suspending, stop):
    server, gpu_file, pids = suspending.server, suspending.gpu_file, suspending.pids
    server.start()
    kids = {name: suspending.open_on_gpu(f"{name}.ipynb") for name in ("a", "b")}
    a_pid, b_pid = pids
    code, _ = server.post("gkews/pause")
    assert code == 202
    s = server.wait_for(("paused", "failed"))
    assert s["state"] == "paused", s["message"]
    assert [nb["status"] for nb in s["notebooks"]] == ["suspended", "suspended"], s["notebooks"]

    # a clean stop would shut its kernels down; after a crash they would exit on losing their parent
    assert server.signal(stop) is not None
    assert alive(a_pid) and alive(b_pid), "a stopping server killed its suspended kernels"
    os.kill(b_pid, signal.SIGKILL)  # b's process does not live to see the next server
    assert wait_gone([b_pid], 15)

    server.start()  # takes seconds: a kernel still watching its old parent would have exited by now
    s = server.status()
    assert s["state"] == "paused", s
    assert s["message"] == ("paused; 1 kernel(s) still suspended or running: resume brings them back live; "
                            "gone, resume restores them from their checkpoints: b.ipynb"), s["message"]
    assert [nb["status"] for nb in s["notebooks"]] == ["suspended", "suspended"]
    assert [k["id"] for k in server.get("api/kernels")] == [kids["a"]]  # the live one, adopted
    assert alive(a_pid)

    code, r = server.post("gkews/resume")
    assert code == 202, r
    s = server.wait_for(("active", "failed"))
    assert s["state"] == "active", s["message"]
    a, b = s["notebooks"]
    assert a["verdict"] == "live-verified" and a["kernel_id"] == kids["a"], a
    assert b["verdict"] == "restored-from-checkpoint", b
    assert b["why_restored"] == f"its kernel process {b_pid} is gone (the server restarted meanwhile)"
    assert json.loads(server.run_cell(kids["a"], CHECK)) == [332833500, "live", a_pid]
    # and as the page reaches it: the kernel websocket of the restarted server
    assert json.loads(server.execute(kids["a"], CHECK)) == [332833500, "live", a_pid]
    b_after = json.loads(server.run_cell(kids["b"], CHECK))
    pids.append(b_after[2])
    assert b_after[:2] == [332833500, "live"] and b_after[2] != b_pid
    assert fake.read(gpu_file)["processes"][str(a_pid)]["state"] == "running"

    server.signal(signal.SIGTERM)  # the adopted kernel is the server's again: a clean stop ends it
    assert wait_gone([a_pid, b_after[2]], 30), "a kernel outlived the server after its resume"


def test_a_notebook_opened_again_after_the_restart_resumes_live_in_its_new_session(suspending):
    """After a server restart the session table is empty: a page reload opens the paused notebook again, with
    a new session and a kernel of its own. The resume then updated the notebook's old session, which was gone:
    "Session not found" (404), the resume failed, the live kernel ran on beside the page's empty one. The new
    session gets the live kernel, and the kernel it had started is shut down."""
    server = suspending.server
    server.start()
    kid = suspending.open_on_gpu("a.ipynb")
    pid = suspending.pids[0]
    code, _ = server.post("gkews/pause")
    assert code == 202
    assert server.wait_for(("paused", "failed"))["state"] == "paused"
    server.signal(signal.SIGKILL)
    server.start()
    assert server.get("api/sessions") == []
    reopened = server.open_notebook("a.ipynb")  # what the page does on a reload
    assert reopened["kernel"]["id"] != kid
    suspending.pids.append(server.pid_of(reopened["kernel"]["id"]))

    code, r = server.post("gkews/resume")
    assert code == 202, r
    s = server.wait_for(("active", "failed"))
    assert s["state"] == "active", s["message"]
    nb = s["notebooks"][0]
    assert nb["verdict"] == "live-verified" and nb["kernel_id"] == kid, nb
    sessions = server.get("api/sessions")
    assert [(x["id"], x["path"], x["kernel"]["id"]) for x in sessions] == [(reopened["id"], "a.ipynb", kid)]
    assert [k["id"] for k in server.get("api/kernels")] == [kid]
    assert wait_gone([suspending.pids[1]], 30), "the kernel the reopened page had started runs on"
    assert json.loads(server.execute(kid, CHECK)) == [332833500, "live", pid]


def test_restarting_an_adopted_kernel_stops_its_process(suspending):
    """Restart Kernel on a kernel a restarted server adopted started a new process and left the old one running
    (jupyter_client stops only a process it owns), holding its GPU and host memory until the machine stopped.
    The old one is killed first; the new one is the server's own, so a clean stop ends it."""
    server = suspending.server
    server.start()
    kid = suspending.open_on_gpu("a.ipynb")
    old = suspending.pids[0]
    code, _ = server.post("gkews/pause")
    assert code == 202 and server.wait_for(("paused", "failed"))["state"] == "paused"
    server.signal(signal.SIGKILL)
    server.start()
    code, _ = server.post("gkews/resume")
    assert code == 202 and server.wait_for(("active", "failed"))["state"] == "active"

    code, _ = server.post(f"api/kernels/{kid}/restart")
    assert code == 200, server.log_tail(20000)
    assert wait_gone([old], 30), "the adopted kernel's process runs on beside the restarted one"
    new = json.loads(server.run_cell(kid, 'import os, json; print(json.dumps([os.getpid(), "weights" in globals()]))'))
    suspending.pids.append(new[0])
    assert new[0] != old and new[1] is False
    server.signal(signal.SIGTERM)
    assert wait_gone([new[0]], 30), "the restarted kernel outlived the server"


def test_a_server_killed_while_it_suspends_leaves_no_kernel_running(suspending):
    """The kernels a pause releases are detached first, to live through a server's death (GPU suspend). A
    server killed during that step left them running for good, out of every server's reach, holding GPU or
    host memory. The restarted server stops them (the pause is rolled forward on the checkpoints) and says so."""
    server, gpu_file = suspending.server, suspending.gpu_file
    server.start()
    kids = [suspending.open_on_gpu(f"{name}.ipynb") for name in ("a", "b")]
    a_pid, b_pid = suspending.pids
    killed_after(server, gpu_file, "gkews/pause", ["checkpoint", a_pid])
    # a is suspended (detached); b, not detached yet, ended with the server
    assert alive(a_pid)
    server.start()
    s = server.status()
    assert s["state"] == "paused", s
    assert "stopped the kernel process(es) of a.ipynb" in s["message"], s["message"]
    assert wait_gone([a_pid, b_pid], 30), "a kernel detached by the killed server runs on"
    code, _ = server.post("gkews/resume")
    assert code == 202
    s = server.wait_for(("active", "failed"))
    assert [nb["verdict"] for nb in s["notebooks"]] == ["restored-from-checkpoint"] * 2, s["notebooks"]
    for kid in kids:
        after = json.loads(server.run_cell(kid, CHECK))
        suspending.pids.append(after[2])
        assert after[:2] == [332833500, "live"]


def test_a_server_killed_while_it_resumes_suspended_kernels_says_they_come_back_live(suspending):
    """A server killed during a resume of suspended kernels (it had put one back on its GPU): both kernels live
    on. The restarted server said "resume again to restore the notebooks from their checkpoints", and left them
    unadopted until that resume; it adopts them at its start, says that they come back live, and they do."""
    server, gpu_file = suspending.server, suspending.gpu_file
    server.start()
    kids = [suspending.open_on_gpu(f"{name}.ipynb") for name in ("a", "b")]
    a_pid, b_pid = suspending.pids
    code, _ = server.post("gkews/pause")
    assert code == 202 and server.wait_for(("paused", "failed"))["state"] == "paused"
    killed_after(server, gpu_file, "gkews/resume", ["unlock", a_pid])  # a is back on its GPU, b still suspended
    assert alive(a_pid) and alive(b_pid)
    server.start()
    s = server.status()
    assert s["state"] == "paused", s
    assert s["message"] == ("the server stopped during a resume; resume again: it brings a.ipynb, b.ipynb back "
                            "live (still suspended or running)"), s["message"]
    assert sorted(k["id"] for k in server.get("api/kernels")) == sorted(kids)  # adopted at the start
    code, _ = server.post("gkews/resume")
    assert code == 202
    s = server.wait_for(("active", "failed"))
    assert [nb["verdict"] for nb in s["notebooks"]] == ["live-verified"] * 2, s["notebooks"]
    for kid, pid in zip(kids, (a_pid, b_pid)):
        assert json.loads(server.run_cell(kid, CHECK)) == [332833500, "live", pid]


def test_a_restart_while_the_pause_releases_the_kernel_is_refused(suspending):
    """Restart Kernel while the pause released the kernels: answered 500, or 200 with a new process running
    cells under "paused 1 notebook(s)", or the pause failed (InvalidStateError). 409 now, saying what to do."""
    server, gpu_file = suspending.server, suspending.gpu_file
    server.start()
    kid = suspending.open_on_gpu("a.ipynb")
    with open(gpu_file + ".lock", "a") as lock:  # the driver's calls wait on it: the release takes long
        fcntl.flock(lock, fcntl.LOCK_EX)
        code, _ = server.post("gkews/pause")
        assert code == 202
        deadline = time.monotonic() + 120
        while server.status()["phase"] != "releasing":  # and stays there: the driver waits on the lock
            assert time.monotonic() < deadline, server.status()
            time.sleep(0.02)
        code, refused = server.post(f"api/kernels/{kid}/restart")
    assert code == 409 and "'a.ipynb' is being paused: its checkpoint is written" in refused["message"], refused
    s = server.wait_for(("paused", "failed"))
    assert s["state"] == "paused" and s["notebooks"][0]["status"] == "suspended", s
    code, _ = server.post("gkews/resume")
    assert code == 202 and server.wait_for(("active", "failed"))["state"] == "active"
    assert json.loads(server.run_cell(kid, CHECK)) == [332833500, "live", suspending.pids[0]]
