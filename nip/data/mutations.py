"""Single-edit source mutations that look like real bugs.

:func:`mutate` lists every mutant of one function, each changing exactly one span of the
text (so the rest keeps its formatting); whether one is wrong is decided by running the tests.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from nip.data._source import Edit, SourceIndex, apply_edits

_COMPARISON = {
    "<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==",
    "in": "not in", "not in": "in", "is": "is not", "is not": "is",
}  # fmt: skip
_COMPLEMENT = {**_COMPARISON, "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_ARITHMETIC = {"+": "-", "-": "+", "*": "+", "/": "//", "//": "/", "%": "//", "**": "*"}
_BUILTIN_SWAP = {"min": "max", "max": "min", "any": "all", "all": "any"}
_METHOD_SWAP = {
    "isupper": "islower", "islower": "isupper", "upper": "lower", "lower": "upper",
    "startswith": "endswith", "endswith": "startswith", "strip": "rstrip",
    "lstrip": "strip", "rstrip": "strip", "find": "rfind", "rfind": "find",
    "index": "rindex", "isdigit": "isalpha", "isalpha": "isalnum",
}  # fmt: skip
_ARITHMETIC_NODES = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_DROPPABLE_CALLS = {"abs", "set", "sorted", "reversed", "int", "round"}
_OP_PATTERN = re.compile(
    r"not\s+in|is\s+not|\*\*=?|//=?|[<>=!]=|[-+*/%<>]=?|\band\b|\bor\b|\bin\b|\bis\b"
)
_FILLER = re.compile(r"[\s()\\]*")


@dataclass(frozen=True)
class Mutant:
    """A mutated version of a solution.

    Attributes:
        operator: Which operator made it (one of :data:`OPERATORS`).
        line: 1-based line of the change; ``before``/``after`` the changed line(s).
        source: The whole mutated solution.
    """

    operator: str
    line: int
    before: str
    after: str
    source: str


def mutate(source: str, function_name: str) -> list[Mutant]:
    """All distinct, compiling single-edit mutants of ``function_name``'s body in ``source``.

    Never its signature or annotations: the problem statement shows them.
    """
    tree = ast.parse(source)
    function = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function_name
    )
    index = SourceIndex(source)
    seen = {source}
    mutants = []
    for operator, edit in _edits(function, index):
        mutated = apply_edits(source, [edit])
        if mutated in seen:
            continue
        seen.add(mutated)
        try:
            compile(mutated, "<mutant>", "exec")
        except (SyntaxError, ValueError):
            continue
        mutants.append(_describe(operator, edit, source, mutated))
    return mutants


def _describe(operator: str, edit: Edit, source: str, mutated: str) -> Mutant:
    first_line = source.count("\n", 0, edit.start) + 1
    old_lines = source.splitlines()
    new_lines = mutated.splitlines()
    removed = source.count("\n", edit.start, edit.end) - edit.text.count("\n")
    last_old = source.count("\n", 0, max(edit.end - 1, edit.start)) + 1
    before = "\n".join(old_lines[first_line - 1 : last_old])
    after_last = last_old - removed
    after = "\n".join(new_lines[first_line - 1 : after_last]) if after_last >= first_line else ""
    return Mutant(operator, first_line, before, after, mutated)


def _edits(function: ast.FunctionDef, index: SourceIndex) -> Iterator[tuple[str, Edit]]:
    """Yield ``(operator, edit)`` for every mutation site in the function body."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # never mutate a docstring
    annotations = {id(n) for stmt in body for a in _annotations(stmt) for n in ast.walk(a)}
    nodes = [n for stmt in body for n in ast.walk(stmt) if id(n) not in annotations]
    parents = {c: p for p in [function, *nodes] for c in ast.iter_child_nodes(p)}
    for operator in OPERATORS:
        generator = _GENERATORS[operator]
        for node in nodes:
            if any(isinstance(p, ast.JoinedStr) for p in _ancestors(node, parents)):
                continue  # f-string positions are unreliable before Python 3.12
            yield from ((operator, edit) for edit in generator(node, index, parents))


def _ancestors(node: ast.AST, parents: dict) -> Iterator[ast.AST]:
    while node in parents:
        node = parents[node]
        yield node


def _annotations(statement: ast.AST) -> Iterator[ast.AST]:
    """Type annotations inside a statement: mutating them only breaks the definition."""
    for node in ast.walk(statement):
        if isinstance(node, ast.AnnAssign) or (
            isinstance(node, ast.arg) and node.annotation is not None
        ):
            yield node.annotation
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            yield node.returns


def _between(index: SourceIndex, left: ast.AST, right: ast.AST, table: dict) -> Iterator[Edit]:
    """Edits swapping the operator token written between two nodes, using ``table``."""
    start, _ = index.span(right)
    _, end = index.span(left)
    segment = index.source[end:start]
    match = _OP_PATTERN.search(segment)
    if match is None:
        return
    outside = segment[: match.start()] + segment[match.end() :]
    if _FILLER.fullmatch(outside) is None:
        return
    replacement = table.get(" ".join(match.group().split()))
    if replacement is not None:
        yield Edit(end + match.start(), end + match.end(), replacement)


def _comparison(node, index, parents):
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        for left, right in itertools.pairwise(operands):
            yield from _between(index, left, right, _COMPARISON)


def _negate_condition(node, index, parents):
    tests = [node.test] if isinstance(node, ast.If | ast.IfExp) else []
    for test in node.ifs if isinstance(node, ast.comprehension) else tests:
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            yield from _between(index, test.left, test.comparators[0], _COMPLEMENT)
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            continue  # drop_not covers it
        else:
            start, end = index.span(test)
            simple = isinstance(test, ast.Name | ast.Call | ast.Attribute | ast.Subscript)
            text = index.text(test)
            yield Edit(start, end, f"not {text}" if simple else f"not ({text})")


def _drop_not(node, index, parents):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        start, end = index.span(node)
        yield Edit(start, end, index.source[start + 3 : end].lstrip())


def _boolean(node, index, parents):
    if isinstance(node, ast.BoolOp):
        for left, right in zip(node.values, node.values[1:], strict=False):
            yield from _between(index, left, right, {"and": "or", "or": "and"})


def _arithmetic(node, index, parents):
    if isinstance(node, ast.BinOp):
        yield from _between(index, node.left, node.right, _ARITHMETIC)
    elif isinstance(node, ast.AugAssign):
        table = {op + "=": new + "=" for op, new in _ARITHMETIC.items()}
        yield from _between(index, node.target, node.value, table)


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _is_negative_int(node: ast.AST) -> bool:
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _is_int(node.operand)


def _shifted(node: ast.AST, index: SourceIndex, delta: int) -> str | None:
    """Text of ``node`` plus ``delta``, folding constants (``n - 1`` + 1 is ``n``)."""
    if _is_int(node):
        return str(node.value + delta)
    if _is_negative_int(node):
        return str(-node.operand.value + delta)
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add | ast.Sub)
        and _is_int(node.right)
    ):
        amount = (node.right.value if isinstance(node.op, ast.Add) else -node.right.value) + delta
        left = index.text(node.left)
        _, left_end = index.span(node.left)
        right_start, _ = index.span(node.right)
        gap = " " if index.source[left_end:right_start].startswith(" ") else ""
        if amount == 0:
            return left
        return f"{left}{gap}{'+' if amount > 0 else '-'}{gap}{abs(amount)}"
    arithmetic = isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC_NODES)
    if arithmetic or isinstance(node, ast.Name | ast.Call | ast.Attribute | ast.Subscript):
        return f"{index.text(node)} {'+' if delta > 0 else '-'} 1"
    return None


def _shift_edits(node: ast.AST | None, index: SourceIndex) -> Iterator[Edit]:
    if node is None:
        return
    start, end = index.span(node)
    for delta in (1, -1):
        text = _shifted(node, index, delta)
        if text is not None:
            yield Edit(start, end, text)


def _range_bound(node, index, parents):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        for argument in node.args[:2]:
            yield from _shift_edits(argument, index)


def _slice_bound(node, index, parents):
    if isinstance(node, ast.Slice):
        yield from _shift_edits(node.lower, index)
        yield from _shift_edits(node.upper, index)


def _index(node, index, parents):
    if (
        isinstance(node, ast.Subscript)
        and not isinstance(node.slice, ast.Slice | ast.Tuple)
        and not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str))
    ):
        yield from _shift_edits(node.slice, index)


def _constant(node, index, parents):
    parent = parents.get(node)
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.USub):
        return  # handled as one negative number, below
    if isinstance(parent, ast.Slice) and node is parent.step:
        return  # a step of 0 only raises ValueError; 1 and -1 are too telling
    if _is_negative_int(node) or _is_int(node):
        yield from _shift_edits(node, index)


def _true_false(node, index, parents):
    if isinstance(node, ast.Constant) and type(node.value) is bool:
        start, end = index.span(node)
        yield Edit(start, end, str(not node.value))


def _builtin_swap(node, index, parents):
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _BUILTIN_SWAP
    ):
        start, end = index.span(node.func)
        yield Edit(start, end, _BUILTIN_SWAP[node.func.id])


def _method_swap(node, index, parents):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        name = node.func.attr
        if name in _METHOD_SWAP:
            _, end = index.span(node.func)
            yield Edit(end - len(name), end, _METHOD_SWAP[name])
        elif name == "split" and not node.args and not node.keywords:
            _, end = index.span(node)
            if index.source[end - 2 : end] == "()":
                yield Edit(end - 2, end, "(' ')")


def _drop_call(node, index, parents):
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _DROPPABLE_CALLS
        and len(node.args) == 1
        and not node.keywords
    ):
        start, end = index.span(node)
        yield Edit(start, end, index.text(node.args[0]))


def _drop_guard(node, index, parents):
    """Delete an ``if`` whose body only returns, breaks, continues or raises."""
    if not (
        isinstance(node, ast.If)
        and not node.orelse
        and len(node.body) == 1
        and isinstance(node.body[0], ast.Return | ast.Break | ast.Continue | ast.Raise)
        and index.owns_lines(node)
    ):
        return
    parent = parents.get(node)
    block = next(
        (
            b
            for b in (getattr(parent, "body", None), getattr(parent, "orelse", None))
            if b and node in b
        ),
        None,
    )
    if block is not None and len(block) >= 2:
        start, end = index.line_span(node.lineno, node.end_lineno)
        yield Edit(start, end, "")


_GENERATORS = {
    "comparison": _comparison,
    "negate_condition": _negate_condition,
    "drop_not": _drop_not,
    "boolean": _boolean,
    "arithmetic": _arithmetic,
    "range_bound": _range_bound,
    "slice_bound": _slice_bound,
    "index": _index,
    "constant": _constant,
    "true_false": _true_false,
    "builtin_swap": _builtin_swap,
    "method_swap": _method_swap,
    "drop_call": _drop_call,
    "drop_guard": _drop_guard,
}
OPERATORS = tuple(_GENERATORS)
"""The mutation operators, in the order they are tried (the first to produce a text wins)."""
