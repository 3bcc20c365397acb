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


def _long_names(command):
    return [name for param in command.params if not getattr(param, "hidden", False)
            for name in (*param.opts, *param.secondary_opts) if name.startswith("--")]


def test_piped_help_cuts_no_option_name_nor_metavar(tmp_path):
    """Off a terminal nothing is cut (docs/cli.md): every option name and metavar of every
    command appears whole in its piped --help, rendered afresh and from the help cache
    alike; rich's ellipsis appears nowhere."""
    import os
    import subprocess
    import sys

    for cached in ("0", "1"):
        env = {**{k: v for k, v in os.environ.items() if k != "COLUMNS"},
               "XDG_CACHE_HOME": str(tmp_path), "DLKIT_HELP_CACHE": cached}
        for name, command in commands():
            text = subprocess.run([sys.executable, "-m", "dlkit", *name.split(), "--help"],
                                  capture_output=True, env=env, timeout=300).stdout.decode()
            assert "\u2026" not in text, f"`dlkit {name} --help | cat` cuts a word:\n{text}"
            words = set(re.findall(r"[^\s\u2500-\u257f]+", text))
            for option in _long_names(command):
                assert option in words, f"`dlkit {name} --help | cat` lacks {option} whole"
            for param in command.params:
                if isinstance(param.metavar, str) and param.metavar.startswith("<"):
                    assert param.metavar in words, f"`dlkit {name}`: {param.metavar} is cut"


def test_help_is_laid_out_wide_when_rich_cannot_be_measured(monkeypatch, capsys):
    """The layout measures rich tables with rich's own (undocumented) methods: a rich without
    them must still print whole help, at the fallback width, not fail."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    from dlkit.cli import help_layout

    def unmeasurable(*_args, **_kwargs):
        raise AttributeError("_calculate_column_widths")

    monkeypatch.setattr(help_layout, "_needed_width", unmeasurable)
    out = StringIO()

    class Utils:  # stands in for typer.rich_utils: a console off a terminal, 80 columns
        @staticmethod
        def _get_rich_console(stderr=False):
            return Console(file=out, width=80, force_terminal=False)

    table = Table("option", "help")
    table.add_row("--context-example-policy", "which context examples a sequence takes " * 4)
    with help_layout.fitted(Utils):
        Utils._get_rich_console().print(table)
    text = out.getvalue()
    assert "--context-example-policy" in text and "\u2026" not in text
    assert max(len(line) for line in text.splitlines()) > 80  # laid out at the fallback
