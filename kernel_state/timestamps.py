"""UTC timestamps as the store writes them (manifests' `created`) and Kubernetes does: the one parser."""
from __future__ import annotations

import calendar
import time

#: how a manifest's `created` is written: time.strftime(CREATED, time.gmtime())
CREATED = "%Y-%m-%dT%H:%M:%SZ"


def utc_epoch(text: str, fmt: str = CREATED) -> float:
    """Seconds since the epoch of a UTC time written as fmt. calendar.timegm, not time.mktime: the local
    time zone and its daylight saving time play no part. ValueError when text does not match."""
    return float(calendar.timegm(time.strptime(text, fmt)))
