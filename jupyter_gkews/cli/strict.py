"""The base of every `jupyter gkews` command: a mistyped option or a stray argument ends the command.

traitlets only warns of an option it does not know (`Unrecognized alias: 'since', it will have no effect`)
and keeps a positional argument it has no use for, then runs without it: `jupyter gkews report
--sinse=2026-12-01` reported the whole log, `resume-test my.ipynb` tested a notebook of its own. Here both
exit with code 2, naming the argument and where the options are listed.
"""
from __future__ import annotations

import sys

from jupyter_core.application import JupyterApp
from traitlets.config.loader import KVArgParseConfigLoader


class _StrictLoader(KVArgParseConfigLoader):
    def _handle_unrecognized_alias(self, arg: str) -> None:
        self.parser.error(f"unknown option --{arg}: `--help` lists this command's options")


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
