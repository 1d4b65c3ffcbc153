"""Where a decode step's time goes (chapter 05): engine profiles broken down by kernel category, and the full
model's time per token predicted from two slices and checked against the full model where it fits one GPU.

    servebook profile run --plan plan.json --runs runs --run-id h200x1-prof    # on the GPU host
    servebook profile predict runs/local-vm/h200x1-prof                        # recompute prediction_check
    servebook profile merge-unit data/runs/h200x1-ref runs/local-x/h200x1-ref-vllm  # a unit of the reference recording

Modules: ``kernels`` (traces, the classification rule), ``steps`` (steps of a trace, per-step breakdown),
``capture`` (the engines' profiler endpoints), ``run`` (a plan of servers), ``predict`` and ``tables`` (the
full model from two slices; tables derived from the recorded ones), ``projection`` (the seed case carried from
the H200 slices to its host: ``slices`` which profiles it subtracts, ``fixes`` the changes it ranks).
"""

from __future__ import annotations

import argparse

from .chapter import chapter_tables, findings, measure_chapter, plot_breakdown, prediction_table, record_inprocess, show_breakdown, where_time_goes
from .capture import ProfilerUnavailable, capture, keep_trace, profiler_launch
from .kernels import CATEGORIES, RULES, Kernel, TraceError, classify, kernel_events, load_trace, rules_table
from .predict import predict_full
from .steps import busy_time, find_anchor, step_breakdown
from .tables import breakdown_check, engine_difference, latest_breakdown, latest_ok, prediction_rows, write_predictions

__all__ = ["CATEGORIES", "RULES", "Kernel", "TraceError", "ProfilerUnavailable", "classify", "kernel_events", "load_trace",
           "rules_table", "find_anchor", "step_breakdown", "busy_time", "capture", "keep_trace", "profiler_launch",
           "predict_full", "prediction_rows", "measure_chapter", "chapter_tables", "findings", "plot_breakdown", "show_breakdown", "prediction_table", "record_inprocess",
           "write_predictions", "engine_difference", "where_time_goes", "breakdown_check", "latest_breakdown", "latest_ok", "register"]


def register(sub) -> None:
    """``servebook profile run`` / ``servebook profile predict``."""
    p = sub.add_parser("profile", help="profile decode steps of engine servers; predict a full model from slices")
    ps = p.add_subparsers(dest="profile_command", required=True)
    r = ps.add_parser("run", help="start each server of a plan, time it, profile its decode steps (GPU host)")
    r.add_argument("--plan", required=True, help="a JSON list of servers: label, engine, model_dir, backend, mode, role, card")
    r.add_argument("--runs", default="runs")
    r.add_argument("--run-id", default=None)
    r.add_argument("--budget-gb", type=float, default=120.0, help="GPU memory for servers started together (default 120)")
    r.add_argument("--steps", type=int, default=40, help="decode steps to profile (default 40)")
    r.add_argument("--tpot-runs", type=int, default=5)
    r.add_argument("--ready-timeout", type=float, default=600.0)
    r.add_argument("--only", default="", help="comma-separated labels of the plan to run (default: all)")
    r.add_argument("--engines", default="", help="comma-separated engines of the plan to run (default: all)")
    r.add_argument("--required-only", action="store_true",
                   help="leave out the plan's entries marked optional (a loan too short for a warm-up batch)")
    r.set_defaults(func=_cmd_run)
    q = ps.add_parser("predict", help="recompute the table prediction_check of a run from its profiles")
    q.add_argument("run_dir")
    q.set_defaults(func=_cmd_predict)
    ex = ps.add_parser("more-starts", help="write the plan of the starts the starts rule still wants (servebook.profile.starts)")
    ex.add_argument("--plan", required=True)
    ex.add_argument("--run-dir", required=True)
    ex.add_argument("--decided-pct", type=float, default=5.0, help="the difference being decided, in %% of the mean (default 5)")
    ex.add_argument("--out", required=True)
    ex.add_argument("--engines", default="", help="comma-separated engines of the plan to consider (default: all)")
    ex.add_argument("--required-only", action="store_true",
                    help="leave out the plan's entries marked optional (a loan too short for a warm-up batch)")
    ex.set_defaults(func=_cmd_more_starts)
    lin = ps.add_parser("linearity", help="recompute the tables slice_linearity and layer_kernels of a run from its profiles")
    lin.add_argument("run_dir")
    lin.set_defaults(func=_cmd_linearity)
    mu = ps.add_parser("merge-unit", help="append a unit of a reference recording (its own run) to the reference run, "
                                          "renaming labels the run already holds (servebook.profile.units), then derive "
                                          "its linearity and predictions again")
    mu.add_argument("run_dir", help="the reference run (data/runs/h200x1-ref)")
    mu.add_argument("unit_dir", help="the unit's run directory (runs/local-.../h200x1-ref-vllm)")
    mu.set_defaults(func=_cmd_merge_unit)
    ca = ps.add_parser("carry", help="predict a run of slices measured on another GPU from the reference's ladders by the "
                                     "projection's rules, and write the table carry_check (servebook.profile.cross_gpu)")
    ca.add_argument("reference_dir", metavar="reference", help="the H200 reference run (data/runs/h200x1-ref)")
    ca.add_argument("target_dir", metavar="target", help="the run measured on the other GPU (its rows are never merged into the reference)")
    ca.add_argument("--profile", default="h100", help="the other GPU's hardware profile (data/hardware; default h100)")
    ca.set_defaults(func=_cmd_carry)


def _cmd_carry(args: argparse.Namespace) -> int:
    from ..results import RunStore
    from .cross_gpu import carry_check

    target, reference = RunStore.at(args.target_dir), RunStore.at(args.reference_dir)
    rows = [r for e in ("sglang", "vllm") for r in carry_check(reference, target, engine=e, profile=args.profile)]
    if not rows:
        print(f"carry: {args.target_dir} holds no measured slice of either engine (nothing written)")
        return 1
    target.replace("carry_check", rows)
    for r in rows:
        print(f"carry {r['label']}: measured {r['measured_ms']:.3f} ms busy, " + (
            f"predicted {r['predicted_ms']:.3f} ({r['error_pct']:+.1f}%), kept {r['kept_ms']:.3f}, all scaled "
            f"{r['all_scaled_ms']:.3f}" if r["predicted_ms"] is not None else f"not predicted: {r['reason']}"))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from ..results import RunStore
    from ..roofline import measure_gpu_bandwidth
    from .run import run_plan

    specs = _chosen(args)
    store = RunStore.open(args.runs, run_id=args.run_id)
    print(f"run directory: {store.path}")
    if not store.rows("memory_bandwidth"):
        try:
            m = measure_gpu_bandwidth()
            try:   # the machine it was measured on, as every profile row says (servebook.profile.machines)
                from .machines import machine_identity

                m = {**m, **machine_identity(), "run_id": store.path.name}
            except Exception:  # noqa: BLE001 - a bandwidth without identity is still a measurement
                pass
            store.append("memory_bandwidth", m)
            print(f"memory bandwidth: read {m['read_tbs']:.2f} TB/s, copy {m['copy_tbs']:.2f} TB/s ({m['device']})")
        except Exception as exc:  # noqa: BLE001 - a finding, the profiles go on
            store.record_failure("memory bandwidth", exc)
            print(f"memory bandwidth not measured: {exc}")
    run_plan(store, specs, budget_gb=args.budget_gb, steps=args.steps, tpot_runs=args.tpot_runs, ready_timeout=args.ready_timeout)
    _derive(store)
    return 0


def _chosen(args: argparse.Namespace) -> list[dict]:
    """The plan's entries that ``--only`` (labels), ``--engines`` and ``--required-only`` (entries not marked
    ``optional``) leave."""
    from .run import load_plan

    specs = load_plan(args.plan)
    for flag, key in (("only", "label"), ("engines", "engine")):
        want = {w.strip() for w in (getattr(args, flag, "") or "").split(",") if w.strip()}
        if want:
            specs = [s for s in specs if s[key] in want]
    return [s for s in specs if not s.get("optional")] if args.required_only else specs


def _derive(store) -> None:
    """The tables derived from a run's profiles written again (``slice_linearity``, ``layer_kernels``,
    ``prediction_check``), each line printed; after ``profile run`` and after a unit is merged."""
    try:
        from .linearity import write_linearity

        lin, _ = write_linearity(store)
        for row in lin:
            print(f"linearity {row['engine']} {row['backend']} {row['depths']}: " + (
                f"{row['per_layer_ms']:.4f} ms per MoE layer, {row['per_step_ms']:.4f} ms per step" if row["kind"] == "step" else
                f"predicted {row['busy_predicted_ms']:.3f} against {row['busy_measured_ms']:.3f} ms busy ({row['busy_error_pct']:+.1f}%)"))
    except Exception as exc:  # noqa: BLE001 - derived tables: recomputed here from the recorded ones if this fails
        print(f"slice_linearity not derived: {type(exc).__name__}: {exc}")
    for row in write_predictions(store):
        err = f", measured {row['measured_ms']:.3f} ms, error {row['error_pct']:+.1f}%" if row["measured_ms"] else ""
        print(f"prediction {row['card']} {row['engine']} {row['backend']} ({row.get('unit')}): " +
              (f"{row['predicted_ms']:.3f} ms per token{err}" if row["predicted_ms"] is not None else
               f"none, {row.get('reason')}"))


def _cmd_more_starts(args: argparse.Namespace) -> int:
    import json

    from ..results import RunStore
    from .starts import extra_starts_plan

    specs = _chosen(args)
    extra = extra_starts_plan(specs, RunStore.at(args.run_dir).rows("profile_runs"), decided_pct=args.decided_pct)
    with open(args.out, "w") as f:
        json.dump(extra, f, indent=1)
    for s in extra:
        print(f"more starts: {s['label']} ({s['why']})")
    print(f"{len(extra)} more start(s) wanted")
    return 0


def _cmd_linearity(args: argparse.Namespace) -> int:
    from ..results import RunStore
    from .linearity import write_linearity

    lin, lk = write_linearity(RunStore.at(args.run_dir))
    for row in lin:
        print(row)
    print(f"layer_kernels: {len(lk)} rows")
    return 0


def _cmd_merge_unit(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..errors import ServebookError
    from ..results import RunStore
    from .units import merge_unit

    for d in (args.run_dir, args.unit_dir):
        if not (Path(d) / "profile_runs.jsonl").is_file():
            raise ServebookError(f"{d}: no profile_runs.jsonl there; pass a run directory of profiles")
    got = merge_unit(RunStore.at(args.run_dir), RunStore.at(args.unit_dir))
    for old, new in got.pop("renamed").items():
        print(f"renamed: {old!r} -> {new!r}")
    print(f"unit id: {got.pop('unit')} (its rows' run_id, its logs under logs/ of that name)")
    print("added: " + ", ".join(f"{t} {n}" for t, n in got.items()))
    _derive(RunStore.at(args.run_dir))   # the merged run's linearity and predictions read both machines' rows again
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    from ..results import RunStore

    for row in write_predictions(RunStore.at(args.run_dir)):
        print(row)
    return 0
