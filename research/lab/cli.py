"""``python -m research.lab run [--scenarios DIR] [--import-itbench DIR] [--seeds N] [--jobs N] --out DIR``.

Without ``--scenarios`` and ``--import-itbench`` it runs the built-in scenarios. Writes ``results.jsonl`` (one row
per run), ``table.md`` and ``skipped.json`` under ``--out``; exits 0 when every run completed, whatever it scored.
Bad input: one line on stderr, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from research.lab import itbench, monitoring
from research.lab.runner import run_all
from research.lab.scenario import BUILTIN, BadScenario, Case, Skipped, load_dir


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"python -m research.lab: {message}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m research.lab", description="Run decklog in the lab: a monitored shop with faults")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run scenarios and score decklog against the baselines")
    run.add_argument("--scenarios", type=Path, help="a folder of scenario YAML files (default: the built-in ones)")
    run.add_argument("--import-itbench", type=Path, dest="itbench", help="a folder of ITBench scenarios")
    run.add_argument("--seeds", type=int, default=1, help="runs per scenario (default 1)")
    run.add_argument("--jobs", type=int, default=3, help="worlds at once (default 3)")
    run.add_argument("--only", default="", help="comma-separated scenario names to run (default: all)")
    run.add_argument("--out", type=Path, required=True, help="where results.jsonl and table.md go")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.seeds < 1 or args.jobs < 1:
        print("python -m research.lab: --seeds and --jobs must be at least 1", file=sys.stderr)
        return 2
    cases: list[Case] = []
    skipped: list[Skipped] = []
    try:
        if args.scenarios is not None:
            if not args.scenarios.is_dir():
                raise BadScenario(f"--scenarios {args.scenarios}: not a directory")
            same = args.scenarios.resolve() == BUILTIN.resolve()
            cases += load_dir(args.scenarios, "builtin" if same else "dir")
        if args.itbench is not None:
            imported, left = itbench.import_dir(args.itbench)
            cases += imported
            skipped += left
        if args.scenarios is None and args.itbench is None:
            cases += load_dir(BUILTIN, "builtin")
        monitoring.find_binary(monitoring.PROMETHEUS)
        monitoring.find_binary(monitoring.ALERTMANAGER)
    except (BadScenario, monitoring.MissingBinary) as exc:
        print(f"python -m research.lab: {exc}", file=sys.stderr)
        return 2
    if args.only:
        wanted = set(args.only.split(","))
        cases = [c for c in cases if c.scenario.name in wanted]
    rows = asyncio.run(run_all(cases, skipped, seeds=args.seeds, jobs=args.jobs, out=args.out))
    print(f"wrote {args.out / 'results.jsonl'} and {args.out / 'table.md'} ({len(rows)} runs, {len(skipped)} skipped)")
    return 1 if any("error" in r for r in rows) else 0
