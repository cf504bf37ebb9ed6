"""pandas objects, as a notebook holds them (real kernels): what comes back, what verify says, and what a
save of them unchanged writes."""
from __future__ import annotations

import pytest

from kernels import Kernel
from test_fidelity_state import changed, unchanged_after_restore

pytest.importorskip("pandas")  # a test dependency: never skipped in `make test`

FRAMES = """
import pandas as pd, numpy as np
rng = np.random.default_rng(0)
n = 100_000
df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.integers(0, 9, n),
                   "c": pd.Categorical(rng.choice(["x", "y", "z"], n)),
                   "t": pd.date_range("2026-01-01", periods=n, freq="min", tz="Europe/Paris"),
                   "s": [f"row{i}" for i in range(n)]})
df["d"] = df["a"] * 2
means = df.groupby("b")["a"].mean()
sparse = pd.Series([1.5, None, 3.0], index=pd.MultiIndex.from_tuples([("a", 1), ("a", 2), ("b", 1)]))
"""
SEEN = ("[df.shape, df.a.sum().hex(), df.t.iloc[5].isoformat(), str(df.c.dtype), list(df.c.cat.categories), "
        "list(df.columns), [str(t) for t in df.dtypes], df.s.iloc[-1], means.to_dict(), "
        "sparse.isna().sum().item(), list(sparse.index)]")


def test_data_frames_come_back_with_their_dtypes_and_read_unchanged(tmp_path):
    """A DataFrame of numbers, categories, time-zoned timestamps and strings comes back equal, dtypes and
    all; verify finds it unchanged after the restore and changed after an edit; and a save of it unchanged
    writes nothing, an edit of one column not the whole frame again (its arrays are one safetensors file,
    written again; its pickle, which holds the strings, is not)."""
    with Kernel(tmp_path) as first:
        first.run(FRAMES)
        result = first.call({"op": "save"})["result"]
        assert result["skipped"] == {} and {"df", "means", "sparse"} <= set(result["saved"]), result
        assert first.call({"op": "save"})["result"]["bytes_written"] == 0
        first.run("df['d'] += 1")
        assert changed(first) == ["df"]
        assert 0 < first.call({"op": "save"})["result"]["bytes_written"] < result["bytes_written"]
        expected = first.value(SEEN)
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value(SEEN) == expected
        assert changed(fresh) == []
        fresh.run("df.loc[0, 'b'] = 8")
        assert changed(fresh) == ["df"]


def test_a_small_frame_of_dates_reads_unchanged_after_a_restore(tmp_path):
    """A frame of a few rows with dates or durations, or a small datetime64 array, read as changed right
    after a restore (and so would fail a live verify): verify could not read the bytes of a datetime64
    array (no buffer format) and compared the variable's pickle instead, which a restore changes."""
    small = ("import pandas as pd, numpy as np\n"
             "events = pd.DataFrame({'when': pd.date_range('2024-03-10', periods=3, freq='h', tz='America/New_York'),"
             " 'took': pd.to_timedelta([1, 2, 3], unit='s'), 'ok': pd.array([True, None, False], dtype='boolean'),"
             " 'bin': pd.interval_range(0, 3)})\n"
             "stamps = np.array(['2024-01-01', 'NaT'], dtype='datetime64[s]')")
    seen = "[str(events.when.iloc[2]), events.took.sum().total_seconds(), str(stamps[1])]"
    with unchanged_after_restore(tmp_path, small, seen) as fresh:
        assert fresh.value(seen) == ["2024-03-10 03:00:00-04:00", 6.0, "NaT"]
        fresh.run("stamps[0] = np.datetime64('2025-01-01')")
        assert changed(fresh) == ["stamps"]


def test_showing_or_reading_a_value_is_no_change(tmp_path):
    """Showing a frame with a DatetimeIndex (a cell's last expression), `to_numpy()`, showing a masked array
    or `filled()`, or `vars()` of a partial made verify say "changed": pandas memoizes derived values in the
    array's `_cache`, numpy sets an unset fill value to its default, reading a partial's __dict__ creates it.
    A real edit of each still reads as changed."""
    with Kernel(tmp_path) as k:
        k.run("import pandas as pd, numpy as np, functools\n"
              "df = pd.DataFrame({'a': range(3), 't': pd.date_range('2026-01-01', periods=3)},"
              " index=pd.date_range('2026-02-01', periods=3, freq='h'))\n"
              "spans = pd.timedelta_range('1s', periods=3)\n"
              "m = np.ma.masked_array(np.arange(4.0), [0, 1, 0, 0])\np = functools.partial(max, 1)")
        k.run("%gkews_checkpoint save")
        k.run("display(df); df.to_numpy(); repr(spans); display(m); m.filled(); vars(p)")
        assert changed(k) == []
        k.run("m.fill_value = 5.0; p.note = 'x'; df.iloc[0, 0] = 9")
        assert changed(k) == ["df", "m", "p"]


def test_frames_derived_from_another_still_copy_on_their_first_write_after_a_restore(tmp_path):
    """Under Copy-on-Write (pandas 3) `renamed = df.rename(...)` and `col = df["b"]` share df's memory until
    one is written. A restore brought them back over one memory with trackers of their own: writing renamed or
    col changed df. In a dict, an attribute, a nullable Int64 column: the same."""
    build = ("import pandas as pd, numpy as np\n"
             "df = pd.DataFrame({'a': np.arange(5.0), 'b': np.arange(5.0) * 10, 'n': pd.array(range(5), 'Int64')})\n"
             "renamed = df.rename(columns={'a': 'A'})\n"
             "col = df['b']\n"
             "class Holder: pass\n"
             "holder = Holder(); holder.part = df[['a', 'n']]\n"
             "frames = {'reset': df.reset_index()}\n")
    write = ("renamed.loc[0, 'A'] = -1.0; col.iloc[1] = -2.0; holder.part.loc[2, 'a'] = -3.0\n"
             "holder.part.loc[3, 'n'] = -4; frames['reset'].loc[4, 'b'] = -5.0\n")
    with Kernel(tmp_path) as first:
        first.run(build + "%gkews_checkpoint save")
        first.run(write)
        expected = first.value("df.astype(float).values.tolist()")
    assert expected == [[0.0, 0.0, 0.0], [1.0, 10.0, 1.0], [2.0, 20.0, 2.0], [3.0, 30.0, 3.0], [4.0, 40.0, 4.0]]
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out and "Warning" not in out, out
        assert fresh.value("bool(np.shares_memory(df['b'].values, col.values))")  # memory still shared
        fresh.run(write)
        assert fresh.value("df.astype(float).values.tolist()") == expected
        assert fresh.value("[renamed.loc[0, 'A'], col.iloc[1], float(holder.part.loc[3, 'n'])]") == [-1.0, -2.0, -4.0]
