"""The README's websocket tables and chat.protocol name the same frames."""

import re
from pathlib import Path

from chat.protocol import ClientFrame, ServerEvent

README = Path(__file__).resolve().parent.parent / "README.md"


def _table_types(after_heading: str) -> set[str]:
    """The first-column `type`s of the table that follows `after_heading`
    in the README's websocket section."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Websocket protocol") :]
    rest = section[section.index(after_heading) :]
    rows = []
    started = False
    for line in rest.splitlines()[1:]:
        if line.startswith("|"):
            started = True
            rows.append(line)
        elif started:
            break
    names = set()
    for row in rows[2:]:  # header and rule
        match = re.match(r"\|\s*`([^`]+)`\s*\|", row)
        assert match, f"a row of the table after {after_heading!r} does not start with a `type`: {row[:60]}"
        names.add(match.group(1))
    return names


def test_client_frames_table_matches_the_enumeration():
    assert _table_types("Client → server") == {member.value for member in ClientFrame}


def test_server_events_table_matches_the_enumeration():
    assert _table_types("Server → client") == {member.value for member in ServerEvent}


def test_no_frame_type_literal_left_in_chat_modules():
    """Frame and event names are spelled only in chat/protocol.py: a quoted
    protocol name elsewhere in chat/ (outside docstrings and comments) is a
    second spelling that can drift."""
    from chat.protocol import LayerMessage

    names = {m.value for m in (*ServerEvent, *ClientFrame, *LayerMessage) if "." in m.value or m.value == "sync"}
    chat = Path(__file__).resolve().parent.parent / "chat"
    import ast

    offenders = []
    for path in chat.rglob("*.py"):
        if path.name == "protocol.py" or "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if node.value in names:
                    offenders.append(f"{path.relative_to(chat.parent)}:{node.lineno} {node.value!r}")
    assert offenders == []
