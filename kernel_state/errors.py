"""Errors that name the problem and the fix."""


class CheckpointError(Exception):
    """Base class: a checkpoint operation could not be done as asked."""


class CheckpointNotFound(CheckpointError):
    pass


class CheckpointWriteError(CheckpointError):
    """Writing failed (disk full, permissions); the previous checkpoint is untouched."""


class CorruptBlob(CheckpointError):
    """A blob is missing, truncated, or its bytes do not match its hash. `salvage`: what was read of a blob
    whose header holds but whose hash does not, (buffer, entries), for the entries that check by their own
    hash (a pack's: one damaged entry fails its own variables, not every variable with a tensor in the pack)."""

    salvage = None


class CorruptManifest(CheckpointError):
    pass


class DamagedProbes(ValueError):
    """The notebook's probe file cannot be read: named, never taken for "no probes"."""
