"""Text-level helpers on Python source: offsets, docstring stripping, example calls.

Edits go span by span (never ``ast.unparse``), so code keeps its author's formatting.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    """Replace ``source[start:end]`` (character offsets) with ``text``."""

    start: int
    end: int
    text: str


class SourceIndex:
    """Maps AST positions (line, UTF-8 byte column) to character offsets in one text."""

    def __init__(self, source: str):
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self._line_starts = [0]
        for line in self.lines:
            self._line_starts.append(self._line_starts[-1] + len(line))

    def offset(self, lineno: int, col_offset: int) -> int:
        """Character offset of an AST position (``col_offset`` counts UTF-8 bytes)."""
        line = self.lines[lineno - 1]
        column = len(line.encode("utf-8")[:col_offset].decode("utf-8", "ignore"))
        return self._line_starts[lineno - 1] + column

    def span(self, node: ast.AST) -> tuple[int, int]:
        """``(start, end)`` character offsets of a node."""
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def line_span(self, first: int, last: int) -> tuple[int, int]:
        """Offsets covering whole lines ``first..last`` (1-based), newline included."""
        return self._line_starts[first - 1], self._line_starts[last]

    def owns_lines(self, node: ast.AST) -> bool:
        """Whether nothing but whitespace shares the node's first and last lines."""
        start, end = self.span(node)
        line_start, line_end = self.line_span(node.lineno, node.end_lineno)  # type: ignore[attr-defined]
        return not self.source[line_start:start].strip() and not self.source[end:line_end].strip()


def apply_edits(source: str, edits: list[Edit]) -> str:
    """Apply non-overlapping edits to ``source``."""
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        source = source[: edit.start] + edit.text + source[edit.end :]
    return source


def strip_docstrings(source: str) -> str:
    """Remove every function's docstring and tidy whitespace, keeping all else as written."""
    index = SourceIndex(source)
    edits = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0]
        is_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        if not (is_docstring and isinstance(first.value.value, str) and index.owns_lines(first)):
            continue
        start, end = index.line_span(first.lineno, first.end_lineno)  # type: ignore[arg-type]
        # A function with nothing but a docstring still needs a body.
        indent = index.lines[first.lineno - 1][: first.col_offset]
        edits.append(Edit(start, end, indent + "pass\n" if len(node.body) == 1 else ""))
    stripped = apply_edits(source, edits)
    lines = [line.rstrip() for line in stripped.splitlines()]
    text = "\n".join(lines).strip("\n") + "\n"
    while "\n\n\n\n" in text:
        text = text.replace("\n\n\n\n", "\n\n\n")
    return text


def example_calls(prompt: str, entry_point: str) -> list[str]:
    """Calls of ``entry_point`` in the statement's docstring: the "visible examples"."""
    tree = ast.parse(prompt)
    function = next(
        (
            n
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == entry_point
        ),
        None,
    )
    docstring = ast.get_docstring(function, clean=False) if function else None
    if not docstring:
        return []
    calls: list[str] = []
    needle = entry_point + "("
    position = docstring.find(needle)
    while position != -1:
        preceded = position > 0 and (
            docstring[position - 1].isalnum() or docstring[position - 1] in "_."
        )
        end = _closing_paren(docstring, position + len(needle) - 1)
        if not preceded and end is not None:
            candidate = docstring[position : end + 1]
            if _is_call(candidate, entry_point) and candidate not in calls:
                calls.append(candidate)
        position = docstring.find(needle, position + 1)
    return calls


def _closing_paren(text: str, open_at: int) -> int | None:
    depth = 0
    quote: str | None = None
    for i in range(open_at, len(text)):
        char = text[i]
        if quote:
            if char == quote and text[i - 1] != "\\":
                quote = None
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return i
        elif char == "\n" and depth > 3:
            return None
    return None


def _is_call(text: str, entry_point: str) -> bool:
    try:
        expression = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return (
        isinstance(expression, ast.Call)
        and isinstance(expression.func, ast.Name)
        and expression.func.id == entry_point
        and not any(isinstance(n, ast.Name) for a in expression.args for n in ast.walk(a))
    )
