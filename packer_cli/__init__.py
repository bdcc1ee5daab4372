"""The ``packer`` command's entry point (``[project.scripts]``), outside the ``packer`` package.

Loading packer (pyarrow, numpy, the tokenizers) takes a good part of a
second; a Ctrl-C in that time used to print Python's traceback of whatever
import it interrupted. This module imports nothing heavy itself, so the
interrupt can be caught around the import and told in one line, exit 130,
as packer.cli tells one during a build.
"""

import sys


def main():
    try:
        from packer.cli import run as cli_run
    except KeyboardInterrupt:
        sys.stderr.write("\npacker: interrupted\n")
        sys.exit(130)
    cli_run()


if __name__ == "__main__":
    main()
