"""Who this process is: a random token drawn at import, kept only in memory.

A kernel that answers with the token stored in a checkpoint is the very process that wrote it (never
stopped, or brought back whole from a Pod snapshot); a fresh process draws a new one.
"""
import os
import secrets
import socket
import time

TOKEN = secrets.token_hex(16)
PID = os.getpid()
STARTED = time.time()


def identity() -> dict:
    return {"token": TOKEN, "pid": os.getpid(), "hostname": socket.gethostname(), "started": STARTED}
