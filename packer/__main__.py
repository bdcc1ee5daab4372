"""``python -m packer``: the ``packer`` command, where its script is not on PATH (the same entry point:
packer._entry.main, with its head start and its one-line Ctrl-C while packer loads)."""

from ._entry import main

if __name__ == "__main__":
    main()
