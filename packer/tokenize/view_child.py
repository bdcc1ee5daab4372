"""transformers' view of a model folder (follows.py), built in a child process that cannot import torch.

``import transformers`` imports torch wherever torch is installed: about 2 s on the 2-core machine,
before ``AutoTokenizer.from_pretrained`` has read a file, and torch stays in the build process, whose
imports keep it out everywhere else. A tokenizer needs none of it: with torch made unimportable
(``sys.modules["torch"] = None``, which transformers reads as "not installed") the view is the same
tokenizer, to the byte, for every family the suite knows (docs/benchmarks.md, "A first build"), and the
parent compares it with its own tokenizer.json (``follows.as_used``: the JSON from the model on, the same
text, is not parsed).
So a first build starts the child at once and loads tokenizer.json while it runs.

The child is used only where it saves time and keeps the answer: a build process that has imported
neither transformers nor torch yet (a process that has, a notebook or a trainer, gets the view in
process at no import cost), and transformers importable here. Whatever goes wrong in the child (it
cannot start, it dies, or transformers fails on the folder for a reason naming torch) gives None, and
the caller builds the view in process as before: the same tokenizer either way, only slower.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

# The child: torch made unimportable before anything else runs, then main() below. packer's and
# packer.tokenize's __init__ are not run there (they import the pipeline, pyarrow, NumPy: 0.5-0.9 s of the
# child's start): the two packages are given as bare modules of their folders, and main() imports only
# follows.py and what it imports (follows_rule.py, transformers_table.py).
# First of all, the child dies with its parent (issue 53: after a SIGKILL of the build it lived on 0.6-2.0 s,
# transformers' import and all): on Linux the kernel SIGKILLs it (PR_SET_PDEATHSIG, as procs.die_with_parent
# asks for a worker; a parent already gone by then is seen in getppid); everywhere a thread waits on a pipe
# whose write end only the parent holds, and ends the child at its end of file.
_HERE = os.path.dirname(os.path.abspath(__file__))
_WATCH = ("import os, sys, threading\n"
          "parent, watch = int(sys.argv[2]), int(sys.argv[3])\n"
          "if sys.platform.startswith('linux'):\n"
          "    try:\n"
          "        import ctypes; ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, 9, 0, 0, 0)\n"
          "    except (OSError, AttributeError):\n"
          "        pass\n"
          "if os.getppid() != parent:\n"
          "    os._exit(1)\n"
          "threading.Thread(target=lambda: os.read(watch, 1) or os._exit(1), daemon=True).start()\n")
_CHILD = (_WATCH + "import sys, types; sys.modules['torch'] = None\n"
          f"for name, path in (('packer', {os.path.dirname(_HERE)!r}), ('packer.tokenize', {_HERE!r})):\n"
          "    sys.modules[name] = types.ModuleType(name); sys.modules[name].__path__ = [path]\n"
          "from packer.tokenize.view_child import main; main()")


class Pending:
    """A started child; ``result()`` waits for it: (the view's JSON, who built it, trouble) or None where
    the caller must build the view itself (it compares the view with its own tokenizer.json)."""

    def __init__(self, proc: subprocess.Popen, watch: int | None = None):
        self.proc, self.watch = proc, watch  # ``watch``: the write end of the child's parent pipe (closed last)

    def result(self) -> tuple[str | None, str, str | None] | None:
        try:
            out, _ = self.proc.communicate()
        finally:
            self.close()
        if self.proc.returncode != 0:
            return None
        try:
            got = json.loads(out)
        except ValueError:
            return None
        trouble = got["trouble"]
        if trouble is not None and "torch" in trouble.lower():  # a class that wants torch: in process, with it
            return None
        return got["view"], got["who"], trouble


    def close(self) -> None:
        """Stop the child if it still runs (Ctrl-C, or tokenizer.json failed to load here)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout,):
            if f is not None:
                f.close()
        if self.watch is not None:
            os.close(self.watch)
            self.watch = None


def start(folder: str) -> Pending | None:
    """The child building transformers' view of ``folder``, started; None where the view is better built
    in process (see the module docstring) or the child cannot start."""
    if any(sys.modules.get(m) is not None for m in ("transformers", "torch")):
        return None
    try:
        if importlib.util.find_spec("transformers") is None:
            return None  # the recorded rule decides, in process (follows_rule.py)
    except (ImportError, ValueError):
        return None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # this process's packer
    watch, keep = os.pipe()  # the child's end of file on ``watch``: this process is gone (both non-inheritable)
    try:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, folder, str(os.getpid()), str(watch)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                pass_fds=(watch,))
    except OSError:
        os.close(keep)
        return None
    finally:
        os.close(watch)
    return Pending(proc, keep)


def main() -> None:
    """In the child: print {"view", "who", "trouble"} for the folder in argv[1] as JSON. tokenizer.json is
    not loaded here (the parent has it, and compares: ``follows.as_used``); without transformers the child
    fails, and the parent decides in process (the recorded rule, which needs the file)."""
    from .follows import transformers_view

    folder = sys.argv[1]
    out = sys.stdout
    sys.stdout = sys.stderr  # anything transformers prints stays out of the answer
    import transformers  # noqa: F401  (ImportError: exit 1, the parent builds the view)

    view, who, trouble = transformers_view(folder, None, folder, copy=False)  # read here, never changed
    out.write(json.dumps({"view": view.to_str() if view is not None else None, "who": who, "trouble": trouble}))
    out.flush()
