"""``python -m research.experiment``: parse the options, plan the runs, run them in parallel processes, write the
results. Bad input is one line on stderr and exit 2, with nothing written."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, NoReturn

from decklog.core.errors import InvalidInput
from decklog.core.views import DEFAULT_BUDGET
from research.experiment import itbench, scenario
from research.experiment.run import ARMS, FAULTS, Spec

PROG = "python -m research.experiment"
EXIT_USAGE = 2
QUICK_FAULTS = ("none", "kill_after_claim", "lease_expiry", "executor_timeout")
QUICK_SCENARIOS = ("bad-deploy", "do-not-act", "storm")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise InvalidInput(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    s = _Parser(prog=PROG, description="The coordination experiment: arms × faults × scenarios × seeds.")
    s.add_argument("--quick", action="store_true", help="a CI-sized subset")
    s.add_argument("--suite", default="builtin", help="builtin, or a folder of scenario YAML files")
    s.add_argument("--import-itbench", type=Path, help="ITBench scenario folder(s) to convert and run")
    s.add_argument("--arms", default=",".join(ARMS))
    s.add_argument("--faults", default="")
    s.add_argument("--seeds", type=int, default=0)
    s.add_argument("--model", default="scripted", help="scripted | scripted-http | claude | recorded:DIR")
    s.add_argument("--record", type=Path, help="with scripted-http: record the exchanges into DIR")
    s.add_argument("--fences", choices=("on", "off"), default="on")
    s.add_argument(
        "--budget", type=int, default=DEFAULT_BUDGET, help=f"the turns' view budget in bytes ({DEFAULT_BUDGET})"
    )
    s.add_argument("--mutation", default="", help=argparse.SUPPRESS)
    s.add_argument("--jobs", type=int, default=0, help="parallel processes (default: the CPU count)")
    s.add_argument("--out", type=Path, required=True)
    return s


def _list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise InvalidInput(f"--{what}: unknown {', '.join(bad) or '(empty)'}; choose from {', '.join(allowed)}")
    return items


def _check_model(model: str) -> None:
    if model in ("scripted", "scripted-http"):
        return
    if model == "claude":
        raise InvalidInput(
            "--model claude needs ANTHROPIC_API_KEY and network access to api.anthropic.com; "
            "neither is available to this build (use scripted or scripted-http)"
        )
    if model.startswith("recorded:"):
        d = Path(model.removeprefix("recorded:"))
        if not (d / "exchanges.jsonl").is_file():
            raise InvalidInput(f"--model {model}: no recording (exchanges.jsonl) in {d}; make one with --record")
        return
    raise InvalidInput(f"--model {model!r}: choose scripted, scripted-http, claude or recorded:DIR")


def plan(args: argparse.Namespace) -> list[tuple[Spec, Path, str]]:
    arms = _list(args.arms, ARMS, "arms")
    faults = _list(args.faults or ",".join(QUICK_FAULTS if args.quick else FAULTS), FAULTS, "faults")
    seeds = args.seeds or (1 if args.quick else 3)
    if seeds < 1:
        raise InvalidInput("--seeds must be at least 1")
    if args.budget < 1:
        raise InvalidInput("--budget must be at least 1 (bytes)")
    _check_model(args.model)
    if args.import_itbench:
        scns = itbench.import_dir(args.import_itbench)
    elif args.suite == "builtin":
        scns = scenario.builtin()
        if args.quick:
            scns = [s for s in scns if s.id in QUICK_SCENARIOS]
    else:
        scns = scenario.load_dir(Path(args.suite))
    if args.out.exists() and any(args.out.iterdir()):
        raise InvalidInput(f"--out {args.out}: not empty (choose a new directory)")
    runs = []
    for s in scns:
        for arm in arms:
            for fault in faults:
                for seed in range(1, seeds + 1):
                    fences = args.fences == "on"
                    spec = Spec(s, arm, fault, seed, fences=fences, mutation=args.mutation, budget=args.budget)
                    runs.append((spec, args.out / "runs" / f"{s.id}.{arm}.{fault}.{seed}", args.model))
    return runs


def _one(spec: Spec, data_dir: Path, model: str, record: str) -> dict[str, Any]:
    from research.experiment.one import run_one

    if record:
        os.environ["DECKLOG_EXPERIMENT_RECORD"] = record
    return asyncio.run(run_one(spec, data_dir, model))


def _bar(done: int, total: int) -> None:
    width = 30
    fill = width * done // max(1, total)
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} runs")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(build_parser().parse_args(argv))
    except InvalidInput as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    runs = plan(args)
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    jobs = args.jobs or os.cpu_count() or 1
    record = str(args.record) if args.record else ""
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_one, spec, d, m, record) for spec, d, m in runs]
        _bar(0, len(futures))
        for i, fut in enumerate(as_completed(futures), 1):
            results.append(fut.result())
            _bar(i, len(futures))
    sys.stderr.write("\n")
    results.sort(key=lambda r: (r["scenario"], r["arm"], r["fault"], r["seed"]))
    from research.experiment.table import table

    (args.out / "results.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in results))
    (args.out / "table.md").write_text(table(results))
    ok = sum(1 for r in results if r["correct"])
    print(f"{len(results)} runs, {ok} correct; results in {args.out}/results.jsonl and {args.out}/table.md")
    return 0
