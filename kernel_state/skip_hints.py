"""What to do about a variable a pickler refused, for the refusals a notebook meets most: the pickler's own
words name the type it stopped at, not what the user holds nor what to keep instead."""
from __future__ import annotations

import re

# (a pattern of the pickler's message, what the user holds, what to do)
_HINTS = [
    (r"memoryview", "a memoryview",
     "keep the bytes, bytearray or array it views instead, which is saved"),
    (r"DataLoaderIter", "a DataLoader's iterator (iter(loader))",
     "the DataLoader itself is saved, but not how far this epoch had got: iter() on it after a restore starts a "
     "new epoch (a shuffled one in the order its saved generator gives next), so the batches this epoch had "
     "left are not seen; to go on mid-epoch, keep the batch count in a variable and skip that many batches of an "
     "epoch whose generator you seed per epoch (g.manual_seed(seed + epoch))"),
    (r"_asyncio\.(Future|Task)|EventLoop|_UnixSelectorEventLoop", "an asyncio event loop, task or future",
     "they live only in this process: keep their results, and call asyncio.get_event_loop() again after a restore"),
    (r"sqlite3\.(Connection|Cursor)", "an SQLite connection or cursor",
     "the database's tables are not saved with it (an ':memory:' one is lost): keep the data in a variable (a "
     "DataFrame, a list of rows), or write it to a file (conn.backup) and connect again after a restore"),
    (r"changed size during iteration", "a container another thread changed while it was saved",
     "pause or stop the thread that changes it, then save again"),
]


def hint(message: str) -> str:
    """`message`, with what it means and what to do when it is one of the refusals above."""
    for pattern, what, fix in _HINTS:
        if re.search(pattern, message):
            return f"{message} ({what}: {fix})"
    return message
