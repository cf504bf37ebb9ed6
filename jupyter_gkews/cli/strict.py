"""The base of every `jupyter gkews` command: a mistyped option or a stray argument ends the command.

traitlets only warns of an option it does not know (`Unrecognized alias: 'since', it will have no effect`)
and keeps a positional argument it has no use for, then runs without it: `jupyter gkews report
--sinse=2026-12-01` reported the whole log, `resume-test my.ipynb` tested a notebook of its own. Here both
exit with code 2, naming the argument and where the options are listed. An unknown option without a value
(`cleanup --dryrun`) is refused the same way: traitlets makes every `--name` an option that takes one, so argparse
answered "argument --dryrun: expected one argument", as though the option existed.
"""
from __future__ import annotations

import argparse
import difflib
import sys

from jupyter_core.application import JupyterApp
from traitlets import TraitError
from traitlets.config.loader import ArgumentError, KVArgParseConfigLoader, _DefaultOptionDict, _KVArgParser


def _unknown(parser: argparse.ArgumentParser, option: str) -> None:
    parser.error(f"unknown option {option}: `--help` lists this command's options")


class _UnknownOption(argparse.Action):
    """An option that is no alias, flag or --Class.trait: refused with or without a value."""

    def __init__(self, **kwargs) -> None:
        super().__init__(nargs="?", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        _unknown(parser, option_string)


class _StrictOptions(_DefaultOptionDict):
    def _add_kv_action(self, key: str) -> None:
        if "." in key:  # --Class.trait: it exists, and argparse rightly asks for its value
            return super()._add_kv_action(key)
        self[key] = _UnknownOption(option_strings=[key], dest=argparse.SUPPRESS)


class _StrictParser(_KVArgParser):
    def parse_known_args(self, args=None, namespace=None):
        # as _KVArgParser does, with --name (no dot) an unknown option rather than a trait awaiting its value
        for container in (self, self._optionals):
            container._option_string_actions = _StrictOptions(container._option_string_actions)
        return argparse.ArgumentParser.parse_known_args(self, args, namespace)


class _StrictLoader(KVArgParseConfigLoader):
    parser_class = _StrictParser

    def _handle_unrecognized_alias(self, arg: str) -> None:
        _unknown(self.parser, f"--{arg}")

    def _convert_to_config(self) -> None:
        # a value traitlets cannot take (`--checkpoint-root=A --GkewsApp.checkpoint_root=B`: one setting given
        # twice) is a wrong option like any other: exit code 2 with its message, not a CRITICAL log and 1
        try:
            super()._convert_to_config()
        except ArgumentError as exc:
            self.parser.error(str(exc).replace("Error loading argument ", "", 1))


class StrictApp(JupyterApp):
    #: whether the command takes positional arguments (the top command: the name of a subcommand)
    takes_arguments = False

    @property
    def command(self) -> str:
        """How the user typed it: `jupyter gkews resume-test` (its name is jupyter-gkews-resume-test)."""
        return self.name.replace("jupyter-", "jupyter ").replace("gkews-", "gkews ")

    def _create_loader(self, argv, aliases, flags, classes):
        # prog: argparse's errors name the command, not the script (`jupyter-gkews: error: ...` for report)
        return _StrictLoader(argv, aliases, flags, classes=classes, log=self.log, subcommands=self.subcommands,
                             prog=self.command)

    def initialize(self, argv=None) -> None:
        super().initialize(argv)
        if self.extra_args and not self.takes_arguments and self.subapp is None:
            print(f"{self.command}: unexpected argument {self.extra_args[0]!r}: this command takes options only "
                  f"(`{self.command} --help` lists them)", file=sys.stderr)
            self.exit(2)
        if self.subapp is None:
            self._refuse_unknown_settings()

    def update_config(self, config) -> None:
        # a value one of this command's own options cannot take (`--step=bogus`, `--timeout=abc`): named as the
        # user typed it, exit code 2, not traitlets' "CRITICAL | Bad config encountered during initialization"
        try:
            super().update_config(config)
        except TraitError as exc:
            from ..app import bad_setting
            words = bad_setting(exc)
            for alias, target in self.aliases.items():
                target = target[0] if isinstance(target, tuple) else target
                if isinstance(alias, str) and words.startswith(f"c.{target} "):
                    words = f"--{alias}{words[len(target) + 2:]}"
                    break
            print(f"{self.command}: {words} (`{self.command} --help` lists the options)", file=sys.stderr)
            self.exit(2)

    def settings_classes(self) -> list[type]:
        """The classes whose --Class.trait settings this command reads."""
        return list(self._classes_inc_parents())

    def _refuse_unknown_settings(self) -> None:
        """A --Class.trait on the command line that names no setting of this command: traitlets only warns
        ("Config option `keep_lst` not recognized") and runs with the default, so `cleanup
        --GkewsApp.keep_lst=100` deleted down to keep_last=5."""
        known = {cls.__name__: cls for cls in self.settings_classes()}
        for section, values in self.cli_config.items():
            cls = known.get(section)
            if cls is None:
                print(f"{self.command}: unknown option --{section}.{next(iter(values), '')}: this command has no "
                      f"{section} settings (`{self.command} --help-all` lists them)", file=sys.stderr)
                self.exit(2)
            names = cls.class_trait_names(config=True)
            for key in values:
                if key not in names:
                    close = difflib.get_close_matches(key, names, n=1)
                    print(f"{self.command}: unknown option --{section}.{key}"
                          + (f" (did you mean --{section}.{close[0]}?)" if close else "")
                          + f": `{self.command} --help-all` lists the settings", file=sys.stderr)
                    self.exit(2)
