"""The project's exception hierarchy.

Every exception kernelcast raises on purpose derives from :class:`KernelcastError`. Those that mean
*the input was wrong* (a file, an option, a manifest, a device spec the user gave) also derive from
:class:`InputError`: the command line maps every :class:`InputError` to one line on stderr and exit
status 2, in one place (``kernelcast.cli.main``). Subclasses keep the builtin base they always had
(``ValueError``, ``LookupError``...) so that callers catching those keep working.
"""

from __future__ import annotations


class KernelcastError(Exception):
    """Base of every exception kernelcast raises on purpose."""


class InputError(KernelcastError):
    """Bad input from the user: the command prints one line and exits with status 2."""


class UsageError(InputError):
    """A command-line option or file that cannot be used, with a message fit to print as is."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill PID``, a batch scheduler's stop), raised by the command line's handler: it
    unwinds as Ctrl-C does, so a command closes its harness workers, its dataset journal and its
    temporary files on the way out, and exits 143 (130 after Ctrl-C)."""
