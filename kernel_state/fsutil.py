"""Durable, private file writes: temp file, fsync, rename, fsync of the directory.

Everything the store creates is private to its owner (files 0600, directories 0700) whatever the umask:
a pickled variable may hold an API key.
"""
import errno
import json
import os
import stat
import uuid

FILE_MODE = 0o600
DIR_MODE = 0o700


class SymlinkRefused(OSError):
    """A path inside the store is a symbolic link: following it could write or delete files elsewhere."""


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


def create_private(path: str) -> int:
    """Open a new file for writing, 0600 even under a umask that takes bits away or adds them; never
    through a symlink (O_EXCL refuses any existing name, links included)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_dir(path: str) -> None:
    """Make sure `path` is a real directory (not a link to one) with mode 0700; create it if missing."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise SymlinkRefused(errno.ELOOP, "is a symbolic link", path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
    if stat.S_IMODE(st.st_mode) != DIR_MODE:
        os.chmod(path, DIR_MODE)


def write_bytes_durable(data: bytes, final_path: str, tmp_dir: str, *, sync_dir: bool = True) -> None:
    """Write `data` so that `final_path` holds either nothing new or all of it, even after a crash."""
    tmp = temp_path(tmp_dir)
    try:
        fd = create_private(tmp)
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


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def rewrite_json_in_place(obj, path: str) -> None:
    """Replace the small JSON file `path` (one of ours, there already) through its own blocks: on a full
    volume, where no new file can be made, a file system that overwrites in place (ext4, xfs, tmpfs) still
    takes it. Not atomic: a crash in the middle can leave it unreadable, so it is only the fallback of
    write_json_durable for a full volume; copy-on-write ones (btrfs, zfs) refuse it as they refuse the other."""
    data = json.dumps(obj, indent=1, sort_keys=False).encode()
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        view = memoryview(data)
        offset = 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_durable_or_in_place(obj, path: str, tmp_dir: str) -> None:
    """write_json_durable; on a full volume, the file's own blocks (rewrite_json_in_place) when it exists."""
    try:
        write_json_durable(obj, path, tmp_dir)
    except OSError as exc:
        if exc.errno not in NO_SPACE or not os.path.isfile(path) or os.path.islink(path):
            raise
        try:
            rewrite_json_in_place(obj, path)
        except OSError:
            raise exc from None  # the volume refused that too: the full volume is the reason to give


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
