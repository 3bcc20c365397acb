"""Every command has help that explains each option (docs are tested to cover every command)."""

import inspect
import re
from pathlib import Path

import typer.main

from dlkit.cli.app import _register_commands, app
from tests.cli.helpers import run_dlkit

README = Path(__file__).parents[2] / "README.md"


def commands():
    """(full name, click command) for every leaf command, including sub-groups."""
    _register_commands()
    found = []

    def walk(prefix, group):
        for name, command in group.commands.items():
            if getattr(command, "commands", None):
                walk(f"{prefix}{name} ", command)
            else:
                found.append((f"{prefix}{name}", command))

    walk("", typer.main.get_command(app))
    return found


def test_every_command_and_option_has_help():
    found = commands()
    assert {"sample", "replay", "verify-golden"} <= {name for name, _ in found}
    for name, command in found:
        assert (command.help or "").strip(), f"`dlkit {name}` has no help text"
        for param in command.params:
            if param.name == "help":
                continue
            assert (getattr(param, "help", None) or "").strip(), f"`dlkit {name}` {param.name} has no help"
        result = run_dlkit(*name.split(), "--help")
        assert result.returncode == 0 and b"Usage" in result.stdout, name
        assert b"18446744073709551615" not in result.stdout, f"`dlkit {name}` prints 2^64-1"
        # a flag takes no value: `--overwrite <bool>` would read as `--overwrite true`
        assert b"<bool>" not in result.stdout, f"`dlkit {name}` shows a flag with a value"


def test_readme_documents_every_command():
    readme = README.read_text()
    for name, _ in commands():
        assert f"dlkit {name}" in readme, f"README does not mention `dlkit {name}`"


def test_version_matches_the_installed_distribution():
    from importlib.metadata import version

    result = run_dlkit("--version")
    assert result.returncode == 0
    assert result.stdout.decode() == f"dlkit {version('dlkit')}\n"


# Help is rendered as markdown: these would vanish (an HTML-like tag), turn into emphasis, or
# become a list or heading instead of the text written.
MARKDOWN_TRAPS = re.compile(r"<[A-Za-z][^>]*>|\*|__|^\s*(?:[-+#]|\d+[.)])\s", re.MULTILINE)


def test_no_help_text_holds_what_markdown_would_swallow():
    texts = {"dlkit": app.info.help}
    for name, command in commands():
        texts[f"dlkit {name}"] = command.help or ""
        texts.update({f"dlkit {name} {p.name}": getattr(p, "help", None) or ""
                      for p in command.params})
    for where, text in texts.items():
        # an indented block is code, shown as written
        prose = "\n".join(line for line in inspect.cleandoc(text).splitlines()
                          if not line.startswith("    "))
        found = MARKDOWN_TRAPS.search(prose)
        assert found is None, f"{where}: markdown would render {found.group()!r}"
