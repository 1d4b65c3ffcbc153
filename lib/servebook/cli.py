"""The ``servebook`` command.

    servebook book [--host local|ssh://user@box[:port]|replay:RUN_DIR] [--record] [--engine transformers] [--model embedded] [--out build/book] [--smoke]
    servebook book --run-id ID [--again]               (resume a run, or measure it again, each execution's rows kept apart)
    servebook html RUN_DIR [--out build/book] [--refresh-findings [--compare-with DIR,...]]
    servebook front [RENDERED_DIR] [--runs DIR]         (the front page of every rendered book)
    servebook compare RUN_A RUN_B [...]                 (chapter 06)
    servebook probe [--profile NAME | --host replay:RUN_DIR] [--json]   (chapter 01)
    servebook whatif --engine sglang==0.5.9 --gpu rtx-pro-6000 --model kimi-k2.5   (chapter 02)

Errors a user can cause print one line naming the problem and the fix, exit status 2.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

from .errors import ServebookError
from .params import PARAMS

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (subcommand parsers inherit it)."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        message = message.replace("\r", "\\r").replace("\n", "\\n")
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def _add_book(sub) -> None:
    p = sub.add_parser("book", help="run every chapter against this host and render the book",
                       description="Execute the notebooks with papermill and render HTML into --out.")
    for name, spec in PARAMS.items():
        flag = "--" + name.replace("_", "-")
        if spec.type is bool:
            p.add_argument(flag, action="store_true", default=spec.default, help=spec.help)
        else:
            p.add_argument(flag, default=spec.default, help=f"{spec.help} (default: {spec.default!r})")
    p.add_argument("--out", default="build/book", help="where the rendered book goes (default: build/book)")
    p.add_argument("--runs", default="runs", help="root of the run directories (default: runs)")
    p.add_argument("--run-id", default=None, help="resume or name a run (default: a new id from the time)")
    p.add_argument("--again", action="store_true",
                   help="with --run-id of a recorded run: measure again what it recorded (each execution's rows kept apart; "
                        "the pages read the latest), instead of resuming")
    p.add_argument("--only", default=None, help="comma-separated chapters to run, e.g. 01,05")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a chapter parameter, e.g. -p max_tokens=64 (repeatable)")
    p.add_argument("--cell-timeout", type=int, default=None, help="seconds one notebook cell may run")
    p.add_argument("--record", action="store_true",
                   help="record every host interaction in the run's cassette.jsonl (replay it with --host replay:RUN_DIR)")
    p.set_defaults(func=_cmd_book)

    h = sub.add_parser("html", help="render an existing run directory as the book")
    h.add_argument("run_dir")
    h.add_argument("--out", default="build/book")
    h.add_argument("--refresh-findings", action="store_true",
                   help="execute chapter 06 again on the recorded tables first (it measures nothing)")
    h.add_argument("--compare-with", default="", help="with --refresh-findings: other run dirs for 06's comparison, comma separated")
    h.add_argument("--refresh", default="", metavar="01[,02,...,06]",
                   help="execute these chapters again on the recorded run first (nothing is measured: 01, 03, 04 and 05 re-read what the host recorded), "
                        "each with the parameters its recorded execution used (said as it starts; -p overrides)")
    h.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE", help="a parameter of a refreshed chapter")
    h.add_argument("--cell-timeout", type=int, default=600,
                   help="seconds one cell of a refreshed chapter may run (default 600; chapter 02's matrix over many cached engine versions can need more)")
    h.set_defaults(func=_cmd_html)


def _chapter_params(items: list[str]) -> dict[str, str]:
    """``-p NAME=VALUE`` arguments as a dict (values stay strings: the chapter's declared type coerces them)."""
    from .errors import ParameterError

    extra = {}
    for item in items:
        if "=" not in item:
            raise ParameterError("param", item, "expected NAME=VALUE")
        k, v = item.split("=", 1)
        extra[k.strip()] = v
    return extra


def _cmd_book(args) -> int:
    from .book import run_book
    from .errors import ParameterError
    from .params import validate

    params = validate({name: getattr(args, name) for name in PARAMS})
    extra = _chapter_params(args.param)
    if args.run_id is not None:
        from .params import _check_run_id

        _check_run_id(args.run_id)
    if args.again and args.run_id is None:
        raise ParameterError("again", True, "it measures a recorded run again: name the run with --run-id ID")
    if args.cell_timeout is not None and args.cell_timeout < 1:
        raise ParameterError("cell_timeout", args.cell_timeout, "seconds one cell may run: 1 or more (leave it out for no limit)")
    only = [o for o in (args.only or "").split(",") if o.strip()] or None
    result = run_book(params, out=args.out, runs_root=args.runs, run_id=args.run_id, only=only, extra=extra,
                      cell_timeout=args.cell_timeout, record=args.record, again=args.again)
    failed = [c["chapter"] for c in result.chapters if c["status"] != "ok"]
    if failed:
        print(f"servebook: {len(failed)} chapter(s) failed: {', '.join(failed)}; their pages show where", file=sys.stderr)
        return 1
    return 0


def _cmd_html(args) -> int:
    from .book import refresh_chapter
    from .chapters import chapters, notebook_parameters
    from .profile.book import html_plan
    from .render import check_run_dir, render_book
    from .errors import ParameterError
    from .paths import writable_dir
    from .results import RunStore

    if args.compare_with and not (args.refresh_findings or "06" in args.refresh):
        raise ParameterError("compare_with", args.compare_with, "it takes effect with --refresh-findings (chapter 06 is executed again)")
    if args.cell_timeout < 1:
        raise ParameterError("cell_timeout", args.cell_timeout, "seconds one cell may run: 1 or more")
    extra = _chapter_params(args.param)
    run_dir = check_run_dir(args.run_dir)
    writable_dir(args.out)
    damaged = RunStore(run_dir).say_damaged()  # said before any chapter reads the tables; the book is still rendered
    if damaged:
        print(f"servebook: warning: {damaged}", file=sys.stderr)
    todo = [c.strip() for c in args.refresh.split(",") if c.strip()]
    if not todo and (plan := html_plan(run_dir)):   # a run of profiles only: its profile chapters, measuring nothing
        todo, extra = plan[0], {**plan[1], **extra}
    if args.refresh_findings and "06" not in todo:
        todo.append("06")
    declared = {n: notebook_parameters(c.source) for n in todo for c in chapters() if c.number == n}  # none: refresh_chapter names the valid ones
    _check_refresh_params(extra, todo, declared)
    failed = 0
    for number in sorted(todo):
        mine = dict(extra, **({"compare_with": args.compare_with} if number == "06" and args.compare_with else {}))
        row = refresh_chapter(args.run_dir, number, {k: v for k, v in mine.items() if k in declared.get(number, {})}, args.cell_timeout)
        if row["status"] != "ok":
            print(f"servebook: chapter {number} failed: {row['error']}; its page shows where", file=sys.stderr)
            failed += 1
    if not any((run_dir / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        raise ParameterError("run_dir", args.run_dir, "the run has no executed chapter (notebooks/NN_*.ipynb) to render; "
                                                      "run its chapters (servebook book --run-id ID) or add --refresh 06")
    print(render_book(run_dir, args.out).resolve())
    return 1 if failed or damaged else 0


def _check_refresh_params(extra: dict, todo: list[str], declared: dict[str, dict]) -> None:
    """``--refresh`` and ``-p`` of ``servebook html``: each chapter one of the book's, each ``-p`` a parameter of a chapter it
    executes again (one line naming them), said before any chapter runs."""
    from .errors import ParameterError

    unknown = [n for n in todo if n not in declared]
    if unknown:  # before any chapter runs: --refresh 06,09 executes nothing
        raise ParameterError("chapter", unknown[0], "one of 01, 02, 03, 04, 05, 06 (a comma list, e.g. --refresh 03,05)")
    if extra and not todo:
        name = next(iter(extra))
        raise ParameterError(name, extra[name], "-p takes effect on a chapter executed again: add --refresh NN")
    known = {k for d in declared.values() for k in d} - {"run_dir", "measure"}
    for name, value in extra.items():
        if declared and name not in known:
            raise ParameterError(name, value, f"no chapter of --refresh {','.join(sorted(todo))} declares it; their parameters: "
                                              f"{', '.join(sorted(known))}")


def _check_paths(args) -> None:
    """A subcommand's run directories (``run_dir``, ``unit_dir``, ``reference_dir``, ``target_dir``) must be recorded runs, and ``servebook front --runs``
    an existing folder, before the command reads them: a wrong path is one line, never an empty result or a traceback."""
    from .errors import ParameterError
    from .render import check_run_dir

    for name in ("run_dir", "unit_dir", "reference_dir", "target_dir"):
        if isinstance(getattr(args, name, None), str) and args.command != "html":  # html checks its own, after its -p
            check_run_dir(getattr(args, name), name)
    if args.command == "front" and args.runs and not os.path.isdir(args.runs):
        raise ParameterError("runs", args.runs, "not a folder; give the folder of the run directories, e.g. data/runs")


def _chapter_commands() -> tuple:
    """The modules through which chapters (and the front page) add their own subcommands: each has
    ``register(subparsers)``. Imported when the parser is built, so ``servebook`` starts without the chapters."""
    from . import frontpage, models, profile
    from .bench import cli as bench_cli
    from .findings import compare as findings_compare
    from .probe import cli as probe_cli
    from .selection import cli as selection_cli

    return probe_cli, selection_cli, bench_cli, findings_compare, models, profile, frontpage


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="servebook", description="An investigation book for LLM-serving performance.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_book(sub)
    for module in _chapter_commands():
        module.register(sub)
    return parser


# A path a user gave that is missing, or a folder where a file must be (or the reverse), or unreadable: one line.
_PATH_ERRORS = (errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EACCES)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # every chapter's stated quantities, gathered before a command runs (not for --help or a parse error): q refuses,
    # on the front page too, a name that no chapter recomputes
    from . import quantities as _every_quantity  # noqa: F401
    try:
        _check_paths(args)
        return int(args.func(args) or 0)
    except ServebookError as exc:
        print(f"servebook: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno in _PATH_ERRORS and exc.filename:  # a path given that is not there, or not what it must be
            print(f"servebook: error: {exc.filename}: {exc.strerror}; check the path given (servebook {args.command} --help)",
                  file=sys.stderr)
            return 2
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        where = exc.filename or (f"the book under {args.out}" if getattr(args, "out", None) else "a result file")
        print(f"servebook: error: cannot write {where}: {exc.strerror}; free space on that disk or pass another --out / --runs",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("servebook: interrupted; servers started by this run were stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
