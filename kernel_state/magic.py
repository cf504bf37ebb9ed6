"""%gkews_checkpoint: save, restore, list, verify, status, probe and delete from a notebook cell."""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import sys
import time

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from . import checkpoint
from .errors import CheckpointError
from .sizes import human_bytes

ACTIONS = ("save", "restore", "list", "verify", "status", "probe", "delete", "auto", "rewind")


def _skipped_lines(skipped: dict) -> list[str]:
    lines = []
    for name, info in skipped.items():
        where = ""
        if info.get("cell"):
            length = info.get("lines") or 1  # older checkpoints did not record the cell's length
            at = f" (line {info['line']} of its {length}: re-run the whole cell)" if length > 1 else ""
            where = f"; re-run cell [{info['cell']}]: {info['source']}{at}"
        since = f" (not saved since checkpoint {info['carried_from']})" \
            if info.get("carried_from") and not info.get("kept_in") else ""  # kept_in's reason says where it is
        lines.append(f"  {name}: {info['reason']}{since}{where}")
    return lines


@contextlib.contextmanager
def _said_if_interrupted(what: str):
    """An interrupt while a checkpoint was being loaded: say that nothing changed (restore_namespace puts
    the values in place only once all are loaded), then stop as interrupted."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"Interrupted: {what}.", file=sys.stderr)
        raise


def _verify_conclusion(result: dict) -> str:
    """The last line of verify: the verdict, and what it does not cover or why it failed."""
    skipped = result.get("skipped_at_save") or {}
    later = result.get("not_in_checkpoint") or []
    outside = f" Not covered (not in the checkpoint: made since, or left out of its save): {', '.join(later)}." \
        if later else ""
    if result["verified"]:
        line = "Verified: the live state is the checkpointed state."
        if skipped:  # never saved, so never compared: "verified" must not read as covering them
            line += f" Not covered (never saved): {', '.join(sorted(skipped))}."
        if result.get("random_state") is None and "random_state" in result:
            line += " Not covered: the random state (saved with --no-random-state)."
        return line + outside
    reasons = []
    if not result["same_process"]:
        saved = result.get("saved_identity") or {}
        reasons.append(f"this kernel (pid {result['identity']['pid']}) is not the process that took the "
                       f"checkpoint (pid {saved.get('pid', '?')}): after a restart or a restore, matching "
                       "values say only what came back, not that this is the same live state")
    differ = [n for n, v in result["variables"].items() if v["verdict"] != "match"]
    if differ:
        reasons.append(f"{len(differ)} variable(s) differ or are missing: {', '.join(differ)}")
    probes = [p["expr"] for p in result["probes"] if p["verdict"] != "match"]
    if probes:
        reasons.append(f"{len(probes)} probe(s) differ: {', '.join(probes)}")
    drawn = [g for g, v in (result.get("random_state") or {}).items() if v != "match"]
    if drawn:
        reasons.append(f"the random state differs ({', '.join(drawn)}): numbers were drawn since the checkpoint, "
                       "so the next draws are not the checkpoint's (a restore puts it back)")
    if result.get("settings"):
        reasons.append(f"settings later cells compute with differ ({'; '.join(result['settings'])}): a full "
                       "restore sets them back")
    return "Not verified: " + "; ".join(reasons) + "." + outside


class _Once(argparse.Action):
    """An option that takes one value: given twice (`--checkpoint A --checkpoint B`), argparse kept the last and
    the magic acted on a checkpoint the user may not have meant."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = namespace.__dict__.setdefault("_given", set())
        if self.dest in seen:
            raise UsageError(f"{self.option_strings[-1]} was given twice ({getattr(namespace, self.dest)} and "
                             f"{values}): give it once")
        seen.add(self.dest)
        setattr(namespace, self.dest, values)


def _words(line: str) -> list[str]:
    """The magic's arguments as a shell splits them: `--notebook "my nb.ipynb"` names my nb.ipynb (IPython's own
    split kept the quotes as part of the name, and a path with a space had no spelling that worked)."""
    try:
        return shlex.split(line)
    except ValueError as exc:  # "No closing quotation"
        raise UsageError(f"{exc} in: {line.strip()}; put a name with spaces in double quotes, "
                         f'as in --notebook "my notebook.ipynb"') from None


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _progress_after(default: float = 1.0) -> float:
    """GKEWS_PROGRESS_AFTER, in seconds. It only decides when the progress line shows: a wrong value is said
    and the default taken, rather than failing the save."""
    value = os.environ.get("GKEWS_PROGRESS_AFTER", "").strip()
    try:
        seconds = float(value) if value else default
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds < math.inf:
        print(f"gkews: GKEWS_PROGRESS_AFTER={value!r} is not a number of seconds (0 or more); the progress line "
              f"shows after {default:g} s", file=sys.stderr)
        return default
    return seconds


class _ProgressLine:
    """One output line, updated in place, once a save has run for a while (GKEWS_PROGRESS_AFTER seconds)."""

    def __init__(self):
        self._start, self._handle = time.monotonic(), None
        self._after = _progress_after()

    def __call__(self, p: dict) -> None:
        if time.monotonic() - self._start < self._after:
            return
        from IPython.display import display
        text = f"saving: {p['variables_done']}/{p['variables_total']} variables, {human_bytes(p['bytes_done'])} written"
        self._last = p
        if self._handle is None:
            self._handle = display({"text/plain": text}, raw=True, display_id=True)
        else:
            self._handle.update({"text/plain": text}, raw=True)

    def end(self, result: dict | None) -> None:
        """The line's last words: it stayed at its last count ("8/17 variables, 0 B written") above "Saved"."""
        if self._handle is None:
            return
        if result is not None:
            text = f"saving: done, {human_bytes(result['bytes_written'])} written"
        else:
            text = f"saving: stopped after {self._last['variables_done']}/{self._last['variables_total']} variables"
        self._handle.update({"text/plain": text}, raw=True)


@magics_class
class CheckpointMagics(Magics):
    @magic_arguments()
    @argument("action", choices=ACTIONS, help="what to do")
    @argument("names", nargs="*", help="variables to save or restore (default: all); the id for delete")
    # extend: `--exclude a --exclude b` left out b alone, and saved the a it was told to leave out
    @argument("--exclude", nargs="+", action="extend", default=[], metavar="NAME",
              help="save: leave these variables out")
    @argument("--checkpoint", action=_Once, metavar="ID", help="restore/verify: this checkpoint instead of the newest; "
              "rewind: this automatic checkpoint (also one from before a restart) instead of a cell number")
    @argument("--device", action=_Once, choices=("cpu", "cuda"), help="restore: put every tensor on this device")
    @argument("--notebook", action=_Once, help="checkpoints of this notebook path (default: this kernel's notebook)")
    @argument("--no-random-state", dest="random_state", action="store_false",
              help="save: leave the global random generators out; restore: leave them as they are")
    @line_magic
    def gkews_checkpoint(self, line):
        """Save this kernel's state to durable storage and bring it back.

        %gkews_checkpoint save [NAMES...] [--exclude NAMES]    write a checkpoint
        %gkews_checkpoint restore [NAMES...] [--checkpoint ID] [--device cpu|cuda]
        %gkews_checkpoint list                                  checkpoints of this notebook
        %gkews_checkpoint verify [--checkpoint ID]              is the live state the saved one?
        %gkews_checkpoint status                                identity, store and progress
        %gkews_checkpoint probe EXPR                            re-check EXPR's result at verify time
        %gkews_checkpoint probe --remove EXPR                   stop re-checking it
        %gkews_checkpoint delete ID                             delete one checkpoint
        %gkews_checkpoint auto on|off|status                    a checkpoint after every cell (kernel undo)
        %gkews_checkpoint rewind N                              back to the state at the end of cell [N]
        %gkews_checkpoint rewind --checkpoint ID                back to that automatic checkpoint (any kernel)

        save and restore carry the global random states (random, numpy, torch, CUDA) unless
        --no-random-state is given.

        Tensors and arrays are stored as safetensors, everything else with pickle/dill, under
        $GKEWS_CHECKPOINT_ROOT (default: the project folder's own, <jupyter data dir>/gkews/projects/<folder>-<hash>/
        checkpoints; %gkews_checkpoint status says where).
        """
        stripped = line.strip()
        if not stripped:  # argparse would say "required: action, names", though names are optional
            raise UsageError(f"%gkews_checkpoint takes an action: {', '.join(ACTIONS)}; for example "
                             "%gkews_checkpoint save (%gkews_checkpoint? lists the options)")
        if stripped.split(None, 1)[:1] == ["probe"]:
            expr = stripped[len("probe"):].strip()
            return self._probe(expr)
        args = self.gkews_checkpoint.parser.parse_args(_words(line))
        if args.names and args.action in ("list", "verify", "status"):  # argparse would take and ignore them
            usage = " [--checkpoint ID]" if args.action == "verify" else ""
            raise UsageError(f"{args.action} takes no names (got {' '.join(args.names)}): "
                             f"%gkews_checkpoint {args.action}{usage}")
        both = sorted(set(args.names) & set(args.exclude))
        if both:
            raise UsageError(f"{', '.join(both)} is both named and excluded: leave "
                             f"{'it' if len(both) == 1 else 'them'} out of the names or of --exclude")
        try:
            return getattr(self, f"_{args.action}")(args)
        except (CheckpointError, ValueError) as exc:
            raise UsageError(str(exc)) from None

    # -- actions ----------------------------------------------------------------------------------
    def _save(self, args):
        progress, result = _ProgressLine(), None
        try:
            result = checkpoint.save(self.shell.user_ns, notebook=args.notebook, names=args.names or None,
                                     exclude=args.exclude, progress=progress, random_state=args.random_state)
        finally:
            progress.end(result)
        saved = _count(len(result["saved"]), "variable")
        print(f"Saved checkpoint {result['id']} for {result['notebook']!r}: {saved}, "
              f"{human_bytes(result['bytes'])} ({human_bytes(result['bytes_written'])} written) "
              f"in {result['seconds']:.2f} s.")
        if result["skipped"]:
            print(f"Skipped {len(result['skipped'])} (not saved):")
            print("\n".join(_skipped_lines(result["skipped"])))
        for warning in result.get("warnings", []):
            print(f"Warning: {warning}")
        retention = result["retention"] or {}
        if retention.get("deleted"):
            print(f"Retention removed {len(retention['deleted'])} older checkpoint(s): "
                  f"{', '.join(retention['deleted'])} (GKEWS_KEEP_LAST, GKEWS_MAX_BYTES).")
        if retention.get("blobs_kept"):
            print(f"Note: {retention['blobs_kept']}.")
        unknown = [n for n in args.exclude if n not in self.shell.user_ns]
        if unknown:  # a typo in --exclude saved the variable it meant to leave out
            print(f"Note: --exclude {' '.join(unknown)}: no such variable in this kernel, so nothing was left out "
                  f"for {'it' if len(unknown) == 1 else 'them'}.")

    def _restore(self, args):
        with _said_if_interrupted("the restore changed nothing: the variables are as they were"):
            result = checkpoint.restore(self.shell.user_ns, notebook=args.notebook, checkpoint=args.checkpoint,
                                        names=args.names or None, device=args.device,
                                        random_state=args.random_state)
        restored = f": {', '.join(result['restored'])}" if result["restored"] else ""
        print(f"Restored {_count(len(result['restored']), 'variable')} from checkpoint {result['checkpoint']} "
              f"(saved {result['created']}) in {result['seconds']:.2f} s{restored}")
        if result.get("random_state"):
            print(f"Random state restored: {', '.join(result['random_state'])}.")
        if result.get("settings"):
            print(f"Settings set back as saved: {'; '.join(result['settings'])}.")
        for warning in result["warnings"]:
            print(f"Warning: {warning}")
        if result["failed"]:
            print(f"Not restored ({len(result['failed'])}):")
            for name, reason in result["failed"].items():
                print(f"  {name}: {reason}")
        if result["skipped_at_save"]:
            print("Never saved (re-run these cells):")
            print("\n".join(_skipped_lines(result["skipped_at_save"])))

    def _list(self, args):
        rows = checkpoint.list_checkpoints(notebook=args.notebook)
        if not rows:
            print("No checkpoints yet for this notebook: %gkews_checkpoint save writes one.")
            return
        print(f"{'id':<26} {'created (UTC)':<21} {'size':>11} {'variables':>9} {'skipped':>7}")
        for r in rows:
            if "error" in r:
                print(f"{r['id']:<26} unreadable: {r['error']}")
                continue
            label = r.get("label") or {}
            after = ""
            if r.get("auto"):
                # a cell [N] of the kernel before a restart, or of a second kernel of this notebook (another
                # tab's): rewind N does not mean that one
                earlier = ""
                if r.get("earlier_kernel"):
                    from .auto import still_running
                    who = "another kernel that still runs" if still_running(r.get("identity") or {}) else \
                        "an earlier kernel"
                    earlier = f" of {who} ({_process(r.get('identity'))})"
                after = f"  auto, after [{label.get('cell')}]{earlier}: {label.get('source', '')}"
            elif r.get("only") is not None:
                after = f"  only {', '.join(r['only']) or '(nothing saved)'}"
            elif r.get("excluded"):
                after = f"  without {', '.join(r['excluded'])}"
            print(f"{r['id']:<26} {r['created']:<21} {human_bytes(r['bytes']):>11} {r['variables']:>9} "
                  f"{r['skipped']:>7}{after}")

    def _verify(self, args):
        result = checkpoint.verify(self.shell.user_ns, notebook=args.notebook, checkpoint=args.checkpoint)
        same = "same process" if result["same_process"] else "a different process"
        matched = [n for n, v in result["variables"].items() if v["verdict"] == "match"]
        print(f"Checkpoint {result['checkpoint']}: {same}; {len(matched)}/{len(result['variables'])} variables "
              f"bit-identical.")
        for name, v in result["variables"].items():
            if v["verdict"] != "match":
                print(f"  {name}: {v['verdict']}" + (f" ({v['detail']})" if v.get("detail") else ""))
        for p in result["probes"]:
            print(f"  probe {p['expr']}: {p['verdict']}" + (f" ({p['detail']})" if p.get("detail") else ""))
        print(_verify_conclusion(result))

    def _status(self, args):
        s = checkpoint.status(notebook=args.notebook)
        ident = s["identity"]
        print(f"kernel pid {ident['pid']} on {ident['hostname']}, identity {ident['token'][:8]}…")
        print(f"notebook {s['notebook']!r}; store {s['root']}; {s['checkpoints']} checkpoint(s)")
        latest = s["latest"]
        if latest and "error" not in latest:
            print(f"newest: {latest['id']}, {human_bytes(latest['bytes'])}, {latest['variables']} variables, "
                  f"{latest['skipped']} skipped")
        if s["probes"]:
            print("probes: " + "; ".join(s["probes"]))
        if s.get("probes_error"):
            print(f"probes: {s['probes_error']}")

    def _probe(self, expr: str):
        if not expr:
            status = checkpoint.status()
            if status.get("probes_error"):
                raise UsageError(status["probes_error"])
            probes = status["probes"]
            print("probes: " + "; ".join(probes) if probes else "No probes: %gkews_checkpoint probe EXPR adds one.")
            return
        remove = expr.split(None, 1)[0] == "--remove"
        if remove:
            expr = expr[len("--remove"):].strip()
            if not expr:  # it answered "no probe '' is recorded"
                raise UsageError("probe --remove takes the expression to stop re-checking: %gkews_checkpoint probe "
                                 "--remove EXPR (%gkews_checkpoint probe lists them)")
        try:
            result = checkpoint.probe(expr, self.shell.user_ns, remove=remove)
        except (CheckpointError, ValueError) as exc:  # a full disk says its fix in a line, as a save does
            raise UsageError(str(exc)) from None
        if remove:
            print(f"Probe removed: {expr}. Saves from now on leave it out.")
            return
        print(f"Probe recorded: {expr} = {result['repr']}. Each save stores its result; verify re-checks it.")

    def _delete(self, args):
        if len(args.names) != 1:
            raise UsageError("delete takes one checkpoint id: %gkews_checkpoint delete ID (see %gkews_checkpoint list)")
        checkpoint.delete(args.names[0], notebook=args.notebook)
        print(f"Deleted checkpoint {args.names[0]}.")

    def _auto(self, args):
        from . import auto
        choice = args.names[0] if len(args.names) == 1 else None
        if choice not in ("on", "off", "status"):
            raise UsageError("auto takes one of on, off, status: %gkews_checkpoint auto on")
        if choice == "on":
            s = auto.AUTO.on(self.shell, notebook=args.notebook)
            print("Auto-checkpointing is on: after every cell that completes, a checkpoint of the namespace "
                  "is written in the background; %gkews_checkpoint rewind N goes back to the end of cell [N].")
        elif choice == "off":
            s = auto.AUTO.off(notebook=args.notebook)
            print("Auto-checkpointing is off; the automatic checkpoints already written are kept.")
        else:
            s = auto.AUTO.status()
        print(auto_status_line(s))

    def _rewind(self, args):
        from . import auto
        by_id = args.checkpoint is not None and not args.names
        if not by_id and (len(args.names) != 1 or not args.names[0].isdigit()):
            raise UsageError("rewind takes one cell number: %gkews_checkpoint rewind 12 (the [12] left of the cell), "
                             "or an automatic checkpoint's id: %gkews_checkpoint rewind --checkpoint ID")
        # IPython has already counted this cell: the one before it is execution_count - 2
        with _said_if_interrupted("the rewind changed nothing: the variables are as they were"):
            r = auto.rewind(None if by_id else int(args.names[0]), self.shell.user_ns, notebook=args.notebook,
                            undo_cell=self.shell.execution_count - 2, checkpoint_id=args.checkpoint,
                            running_cell=self.shell.execution_count - 1)
        label = r["label"] or {}
        earlier = " of an earlier kernel" if r.get("earlier_kernel") else ""
        source = label.get("source", "")  # a rewind's own "before" checkpoint is in parentheses already
        shown = source if source.startswith("(") and source.endswith(")") else f"({source})"
        print(f"Rewound to the end of cell [{r['cell']}]{earlier} {shown} in {r['seconds']:.2f} s.")
        for what, names in (("changed", r["changed"]), ("came back", r["came_back"]),
                            ("removed (defined after that cell)", r["removed"])):
            if names:
                print(f"  {what}: {', '.join(names)}")
        for name, reason in r["failed"].items():
            print(f"  could not: {name}: {reason}")
        if r["skipped_at_save"]:
            print("  never saved (re-run these cells):")
            print("\n".join("  " + line for line in _skipped_lines(r["skipped_at_save"])))
        for warning in r["warnings"]:
            print(f"  warning: {warning}")
        print(f"  {len(r['unchanged'])} unchanged. Undo with %gkews_checkpoint rewind {r['undo_cell']}.")


def _process(identity: dict | None) -> str:
    """A kernel process as the list names it: its pid and when it started (UTC, as the list's times)."""
    identity = identity or {}
    started = identity.get("started")
    if not isinstance(started, (int, float)):
        return f"pid {identity.get('pid', '?')}"
    return f"pid {identity.get('pid', '?')}, started {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(started))}"


def auto_status_line(s: dict) -> str:
    state = "on" if s["enabled"] else "off"
    if s["paused"]:
        state += " (paused while a save or restore runs)"
    parts = [f"auto-checkpointing {state}", f"{s['written']} written", f"{s['coalesced']} coalesced"]
    if s["writing"]:
        parts.append("writing now")
    if s["last"]:
        label = s["last"].get("label") or {}
        parts.append(f"newest after cell [{label.get('cell')}]")
    if s["stage_seconds"]["p50"] is not None:
        parts.append(f"foreground p50 {s['stage_seconds']['p50'] * 1000:.0f} ms")
    if s["keep_last"] is not None and s["max_bytes"] is not None:  # else setting_problem says which is wrong
        parts.append(f"keeps {s['keep_last']} / {human_bytes(s['max_bytes']) if s['max_bytes'] else 'no byte limit'}")
    line = "; ".join(parts) + "."
    staging, dirty = s.get("staging") or {}, s.get("dirty_pages") or {}
    if staging.get("limit") is not None:
        line += f"\nWarm staging memory: {human_bytes(staging['pooled'])} of {human_bytes(staging['limit'])}."
    if dirty.get("off"):
        line += f"\nDirty-page tracking is off ({dirty['off']}): large arrays are hashed whole after every cell."
    if s["error"]:
        line += f"\nLast error: {s['error']}"
    if s.get("setting_problem"):
        line += f"\n{s['setting_problem']}."
    return line
