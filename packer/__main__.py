"""``python -m packer``: the ``packer`` command, where its script is not on PATH (the same entry point:
packer_cli.main, with its head start and its one-line Ctrl-C while packer loads)."""

from packer_cli import main

if __name__ == "__main__":
    main()
