"""The CLI package keeps the project's module size convention: no command module grows past ~400 lines (the
`run` command's flag parsing, job assembly, running and summary each live in their own module)."""

from __future__ import annotations

from pathlib import Path

import evsys.cli

MAX_LINES = 400


def test_every_cli_module_stays_under_the_size_limit() -> None:
    package = Path(evsys.cli.__file__).parent
    sizes = {path.name: len(path.read_text().splitlines()) for path in package.glob("*.py")}
    assert sizes["run.py"] > 0 and len(sizes) > 10  # the package was really read
    too_long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert too_long == {}, f"modules over {MAX_LINES} lines: {too_long}"


def test_the_summary_and_job_runner_are_their_own_modules() -> None:
    """`evsys jobs show` and `evsys tasks validate` print and run jobs without the `run` command's flags."""
    from evsys.cli.run_job import EXIT_CANCELLED, run_job
    from evsys.cli.summary import print_summary

    assert EXIT_CANCELLED == 130 and callable(run_job) and callable(print_summary)
