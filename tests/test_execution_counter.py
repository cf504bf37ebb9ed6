"""A resumed notebook reads as one session: the restored kernel continues the execution counter."""
from __future__ import annotations

from kernels import Kernel


def next_count(kernel: Kernel) -> int:
    """Run a cell the way a notebook does and return the number its prompt shows."""
    reply = kernel.client.execute_interactive("x = 1", timeout=60, output_hook=lambda msg: None)
    return reply["content"]["execution_count"]


def test_the_restored_kernel_continues_the_counter(tmp_path):
    first = Kernel(tmp_path)
    try:
        for _ in range(3):
            first.run("w = 41")
        saved = first.call({"op": "save", "notebook": "work/experiment.ipynb"})
        assert saved["ok"], saved
    finally:
        first.close()

    second = Kernel(tmp_path)
    try:
        restored = second.call({"op": "restore", "notebook": "work/experiment.ipynb"})
        assert restored["ok"], restored
        assert next_count(second) == 4  # cells [1]..[3] ran before the pause: the next one is [4]
        assert second.value("w") == 41
    finally:
        second.close()


def test_a_counter_already_past_the_checkpoint_is_left_alone(tmp_path):
    kernel = Kernel(tmp_path)
    try:
        kernel.run("w = 41")
        assert kernel.call({"op": "save", "notebook": "work/experiment.ipynb"})["ok"]
        for _ in range(3):
            kernel.run("w = 42")
        assert kernel.call({"op": "restore", "notebook": "work/experiment.ipynb"})["ok"]
        assert next_count(kernel) == 5  # restoring an older checkpoint never reuses prompt numbers
    finally:
        kernel.close()
