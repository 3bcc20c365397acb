"""``dlkit mixture check``: a pretraining mixture of databases, checked against them."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from dlkit.cli.app import app
from dlkit.cli.console import console, plain, print_json
from dlkit.text import counted

PANEL = "Relational sampling"

mixture_app = typer.Typer(help="Mixtures of databases for pretraining (dlkit-mixture.toml).",
                          no_args_is_help=True)
app.add_typer(mixture_app, name="mixture", rich_help_panel=PANEL)


@mixture_app.command("check")
def check(
    mixture: Path = typer.Argument(..., help="The mixture file (dlkit-mixture.toml)."),
    as_json: bool = typer.Option(False, "--json", help="Print the check as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q",  # noqa: ARG001
                               help="Accepted for uniformity: check prints only its result."),
) -> None:
    """Check a mixture against its databases and print its components, seeds and weights.

    Each database is opened in turn: its tasks must exist, every database must be embedded
    by the same model, and every training component must have train seeds. Then the weights
    (by seeds, by tasks or as given) and the mixture hash, which names the order of the
    training steps (docs/mixture.md). Example:

        dlkit mixture check pretrain/dlkit-mixture.toml --json
    """
    from dlkit.sampler.mixture import SPLITS, check_mixture, load_mixture

    checked = check_mixture(load_mixture(mixture))
    if as_json:
        print_json(checked.to_json())
        return
    table = Table(title=f"mixture {plain(checked.source)}", title_justify="left",
                  header_style="bold")
    table.add_column("component")
    table.add_column("role")
    for name in (*(f"{s} seeds" for s in SPLITS), "weight", "share"):
        table.add_column(name, justify="right")
    total = checked.block_size
    for c in checked.components:
        table.add_row(plain(c.name), "trained" if c.train else
                      "held out" if c.named else "held out (not named)",
                      *(f"{c.seeds_per_split[s]:,}" for s in SPLITS),
                      str(c.weight) if c.train else "-",
                      f"{100 * c.weight / total:.1f}%" if c.train else "-")
    console.print(table)
    console.print(f"{counted(len(checked.components), 'component')} "
                  f"({len(checked.training)} trained on), weights by {checked.weighting.value}; "
                  f"a block of {total:,} steps; embedder {plain(checked.embedder)}",
                  highlight=False)
    console.print(f"mixture hash {checked.mixture_hash}", highlight=False)
