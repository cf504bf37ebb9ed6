"""Durable file writes: temp file, fsync, rename, fsync of the directory."""
import json
import os
import uuid


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(tmp_dir: str, suffix: str = "") -> str:
    return os.path.join(tmp_dir, f"{uuid.uuid4().hex}{suffix}.tmp")


def write_bytes_durable(data: bytes, final_path: str, tmp_dir: str, *, sync_dir: bool = True) -> None:
    """Write `data` so that `final_path` holds either nothing new or all of it, even after a crash."""
    tmp = temp_path(tmp_dir)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final_path)
    except BaseException:
        remove_quietly(tmp)
        raise
    if sync_dir:
        fsync_dir(os.path.dirname(final_path))


def write_json_durable(obj, final_path: str, tmp_dir: str) -> None:
    data = json.dumps(obj, indent=1, sort_keys=False).encode()
    write_bytes_durable(data, final_path, tmp_dir)


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
