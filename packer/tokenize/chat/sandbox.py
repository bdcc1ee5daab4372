"""The jinja2 environment chat templates run in: transformers' ``apply_chat_template`` environment, with bounds.

The environment is the one transformers 5 compiles templates in
(``ImmutableSandboxedEnvironment``, ``trim_blocks``, ``lstrip_blocks``,
``loopcontrols``, ``raise_exception``, ``strftime_now``, a ``tojson`` that
does not escape HTML, a ``namespace`` that refuses underscore names, the
``{% generation %}`` tag), so a conversation renders to the same string.

A template is untrusted code that runs once per conversation, so each render
is bounded (docs/chat.md, "Bounds"): a time budget, checked in every hook the
sandbox offers (calls, attribute and item access, arithmetic, each loop
iteration, each piece of output), and a size budget for every string or list
the template builds (``*``, ``+``, ``~``, ``%``, filters, method calls) and
for the output. A render over either budget raises ``TemplateLimit``, which
the build counts as a skip (``template_limit``): the build goes on, and
signals are served between two hooks. Expressions are never folded at
compile time (every filter takes the context, every operator is
intercepted), so a bomb in the template's source cannot go off while it
compiles.
"""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime

RENDER_SECONDS = 2.0  # one conversation's render (a real template: well under a millisecond), and as much
# again per 8 MiB of the conversation's text
TIMEOUTS_IN_A_ROW = 8  # this many conversations over their time budget, none rendered between: the build stops
MIN_CHARS = 1 << 20  # the size budget: at least this, else LIMIT_FACTOR x the conversation's own text
LIMIT_FACTOR = 16
MAX_INT_ARG = 100_000  # an int passed to a filter or method (a width, an indent, a count)
MAX_JSON_INDENT = 64
_FMT_WIDTH = re.compile(r"%[-+ #0]*(\d+)?(?:\.(\d+))?|\{[^{}]*?:[^{}]*?(\d+)[^{}]*\}")


class TemplateLimit(Exception):
    """A render over its time or size budget; ``reason`` is the skip reason, ``timeout`` which budget."""

    reason = "template_limit"

    def __init__(self, message: str, timeout: bool = False):
        super().__init__(message)
        self.timeout = timeout


class Budget:
    """One render's bounds: a deadline and the most characters any one value may hold."""

    __slots__ = ("seconds", "deadline", "chars", "ticks")

    def __init__(self, seconds: float, chars: int):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.chars = chars
        self.ticks = 0

    def tick(self) -> None:
        self.ticks += 1
        if not self.ticks & 255 and time.monotonic() > self.deadline:
            raise TemplateLimit(f"the template ran over its {self.seconds:g} s budget for one conversation", True)

    def size(self, n: int, what: str = "a value") -> None:
        if n > self.chars:
            raise TemplateLimit(f"the template built {what} of {n:,} items, over its budget of {self.chars:,}")


def _length(x) -> int:
    return len(x) if isinstance(x, (str, list, tuple, dict)) else 0


def _check_format(budget: Budget, fmt: str) -> None:
    for m in _FMT_WIDTH.finditer(fmt):
        for w in m.groups():
            if w and len(w) > 6 or (w and int(w) > MAX_INT_ARG):
                raise TemplateLimit(f"a format width of {w} in the template")


def _check_args(budget: Budget, args, kwargs) -> None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_INT_ARG:
            raise TemplateLimit(f"the template passed {a:,} to a filter or method (at most {MAX_INT_ARG:,})")


def _guarded_filter(name: str, func, budget_of):
    """``func`` as a filter that checks its arguments and its result, and takes the context (so the
    compiler never runs it on constants while compiling)."""
    import jinja2
    from jinja2.utils import _PassArg

    pass_arg = _PassArg.from_obj(func)

    @jinja2.pass_context
    def guarded(context, *args, **kwargs):
        budget = budget_of()
        budget.tick()
        _check_args(budget, args[1:], kwargs)
        if name == "tojson" and isinstance(kwargs.get("indent", args[1] if len(args) > 1 else None), int):
            indent = kwargs.get("indent", args[1] if len(args) > 1 else None)
            if indent > MAX_JSON_INDENT:
                raise TemplateLimit(f"tojson(indent={indent:,}) in the template (at most {MAX_JSON_INDENT})")
        if name == "format" and args and isinstance(args[0], str):
            _check_format(budget, args[0])
        if name == "replace" and len(args) >= 3 and isinstance(args[0], str) and isinstance(args[1], str):
            s, old, new = args[0], args[1], str(args[2])
            grow = (len(s) + 1 if not old else s.count(old)) * max(0, len(new) - len(old))
            budget.size(len(s) + grow, "a string")
        if pass_arg is _PassArg.context:
            out = func(context, *args, **kwargs)
        elif pass_arg is _PassArg.eval_context:
            out = func(context.eval_ctx, *args, **kwargs)
        elif pass_arg is _PassArg.environment:
            out = func(context.environment, *args, **kwargs)
        else:
            out = func(*args, **kwargs)
        budget.size(_length(out))
        return out

    return guarded


class BoundedRange:
    """``range(...)`` whose iteration ticks the budget (a loop with an empty body calls no hook)."""

    def __init__(self, r, budget):
        self._r, self._b = r, budget

    def __iter__(self):
        b = self._b
        for x in self._r:
            b.tick()
            yield x

    def __len__(self):
        return len(self._r)

    def __getitem__(self, i):
        return self._r[i]

    def __contains__(self, x):
        return x in self._r

    def __reversed__(self):
        return BoundedRange(self._r[::-1], self._b)


def _environment_class():
    """The environment class (built on first use: jinja2 is imported only by chat builds)."""
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

    class GenerationTracker(Extension):
        """transformers' ``{% generation %}`` tag: records the character span its body renders to."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_generation", []), [], [], body).set_lineno(lineno)

        def _generation(self, caller):
            rv = caller()
            env = self.environment
            if env.packer_blocks is not None:
                start = sum(map(len, env.packer_blocks))
                env.packer_spans.append((start, start + len(rv)))
            return rv

    class Environment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "+", "%", "//"])

        def __init__(self):
            super().__init__(trim_blocks=True, lstrip_blocks=True,
                             extensions=[GenerationTracker, jinja2.ext.loopcontrols])
            self.budget = Budget(RENDER_SECONDS, MIN_CHARS)
            self.packer_blocks = None  # while tracking {% generation %}: the output so far
            self.packer_spans: list = []

        def _parse(self, source, name, filename):
            """The template's tree with every loop's iterable and every ``~`` routed through the budget."""
            tree = super()._parse(source, name, filename)
            for node in tree.find_all(nodes.For):
                node.iter = nodes.Call(nodes.Name("packer_iter", "load"), [node.iter], [], None, None)
            for node in list(tree.find_all(nodes.Concat)):
                node.nodes = [nodes.Call(nodes.Name("packer_concat", "load"), [nodes.List(node.nodes)], [], None, None)]
            return tree

        def call_binop(self, context, operator, left, right):
            b = self.budget
            b.tick()
            if operator == "+" and type(left) is type(right) and type(left) in (str, list):  # (most calls)
                if len(left) + len(right) > b.chars:
                    b.size(len(left) + len(right))
                return left + right
            if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
                if abs(left) > 1 and right * math.log2(abs(left)) > 4096:
                    raise TemplateLimit(f"{left} ** {right} in the template")
            elif operator == "*":
                if isinstance(right, int) and _length(left):
                    b.size(_length(left) * right)
                elif isinstance(left, int) and _length(right):
                    b.size(_length(right) * left)
            elif operator == "+" and _length(left) and _length(right):
                b.size(_length(left) + _length(right))
            elif operator == "%" and isinstance(left, str):
                _check_format(b, left)
            out = super().call_binop(context, operator, left, right)
            b.size(_length(out))
            return out

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja's own signature)
            b = __self.budget
            b.tick()
            if __obj is not safe_range:
                _check_args(b, args, kwargs)
            if getattr(__obj, "__name__", "") == "format" and isinstance(getattr(__obj, "__self__", None), str):
                _check_format(b, __obj.__self__)
            out = super().call(__context, __obj, *args, **kwargs)
            if isinstance(out, range):
                return BoundedRange(out, b)
            b.size(_length(out))
            return out

        def getattr(self, obj, attribute):
            self.budget.tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            self.budget.tick()
            return super().getitem(obj, argument)

    return Environment, BoundedRange


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja's own tojson escapes HTML characters; transformers' does not.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def new_environment(now: datetime | None = None):
    """An environment as transformers' ``apply_chat_template`` builds it, bounded; ``now`` fixes the
    date ``strftime_now`` gives (a build's conversations all see the date the build started)."""
    import jinja2
    from jinja2.utils import Namespace

    Environment, BoundedRange = _environment_class()
    env = Environment()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(fmt):
        return (now or datetime.now()).strftime(fmt)

    class TemplateNamespace(Namespace):
        # As transformers': a namespace refuses underscore names (no way to CPython internals);
        # every value stored is measured.
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check(name)
            env.budget.size(_length(value))
            Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace cannot hold {name!r}")

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    def packer_iter(x):
        if isinstance(x, BoundedRange):
            return x
        b = env.budget
        return (b.tick() or v for v in x) if isinstance(x, (str, list, tuple)) and len(x) > 64 else x

    def packer_concat(parts):
        b = env.budget
        b.size(sum(len(p) if isinstance(p, str) else 64 for p in parts), "a string")
        return "".join(p if isinstance(p, str) else str(p) for p in parts)

    env.filters["tojson"] = _tojson
    for name in list(env.filters):
        env.filters[name] = _guarded_filter(name, env.filters[name], lambda: env.budget)
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                       namespace=TemplateNamespace, packer_iter=packer_iter, packer_concat=packer_concat)
    return env


def uses_date(source: str) -> bool:
    """Whether a template reads the date (``strftime_now``): its build then records the date it used."""
    return "strftime_now" in source


def has_generation_tags(source: str) -> bool:
    """transformers' test for ``{% generation %}`` markers."""
    return re.search(r"\{%-?\s*generation\s*-?%\}", source) is not None
