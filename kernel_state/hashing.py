"""Content hashes. xxh3-128 detects corruption at memory speed; it is not a defence against forgery."""
import xxhash


def new_hasher():
    return xxhash.xxh3_128()


def digest_bytes(data) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def digest_file(path: str, block: int = 8 << 20) -> str:
    """The digest of a whole file, read into one reused buffer."""
    hasher = new_hasher()
    buf = bytearray(block)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            hasher.update(view[:n])
    return hasher.hexdigest()


def file_blocks(f, length=None, block: int = 8 << 20):
    """The next `length` bytes of an open file (all of the rest when None), in blocks of at most `block`:
    a region is hashed or compared without holding it whole. Stops early at the end of the file."""
    left = float("inf") if length is None else length
    while left > 0:
        data = f.read(int(min(block, left)))
        if not data:
            return
        yield data
        left -= len(data)
