"""No statement of the package follows a return, raise, continue or break in its own block: such
code never runs, and reads as if it did. (ruff has no rule for it without its preview mode.)"""

import ast
from pathlib import Path

import market_timers

PACKAGE = Path(market_timers.__file__).parent
ENDS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def unreachable(tree: ast.AST) -> list[tuple[int, int]]:
    """(line of the dead statement, line of the statement that ends its block)."""
    found = []
    for node in ast.walk(tree):
        for block in (getattr(node, name, None) for name in ("body", "orelse", "finalbody")):
            if not isinstance(block, list):
                continue
            pairs = zip(block, block[1:], strict=False)
            found += [(after.lineno, end.lineno) for end, after in pairs if isinstance(end, ENDS)]
    return found


def test_no_statement_after_a_return_raise_continue_or_break():
    dead = [f"{path.relative_to(PACKAGE)}:{line}: after line {end}"
            for path in sorted(PACKAGE.rglob("*.py"))
            for line, end in unreachable(ast.parse(path.read_text(), str(path)))]
    assert dead == []


def test_the_check_finds_code_after_a_return():
    tree = ast.parse("def f():\n    return 1\n    x = 2\n")
    assert unreachable(tree) == [(3, 2)]
