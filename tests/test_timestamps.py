"""UTC timestamps are read the same whatever the local time zone and its daylight saving time."""
from __future__ import annotations

import calendar
import time

import pytest

from jupyter_gkews.cli.report import parse_until
from jupyter_gkews.k8s.workspace import age
from kernel_state.timestamps import utc_epoch


@pytest.fixture(params=["Europe/Berlin", "America/New_York", "UTC"])
def local_zone(request, monkeypatch):
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


def test_a_snapshot_age_during_daylight_saving_time(local_zone):
    """`jupyter gkews status` shows the age of the last Pod snapshot: 10 minutes is 10 minutes, in July
    in Berlin too (time.mktime - time.timezone gave 1h10min there)."""
    now = calendar.timegm((2026, 7, 1, 12, 10, 0))
    assert time.localtime(now).tm_isdst == (local_zone != "UTC")  # the zone really is on summer time
    assert age("2026-07-01T12:00:00Z", now=now) == "10min ago"
    assert age("2026-01-15T12:00:00Z", now=calendar.timegm((2026, 1, 15, 12, 0, 42))) == "42s ago"


def test_the_one_parser_reads_utc(local_zone):
    assert utc_epoch("2026-07-01T12:00:00Z") == calendar.timegm((2026, 7, 1, 12, 0, 0))
    assert parse_until("2026-07-01") == calendar.timegm((2026, 7, 2, 0, 0, 0))
    with pytest.raises(ValueError):
        utc_epoch("yesterday")
