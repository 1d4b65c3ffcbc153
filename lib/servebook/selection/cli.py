"""CLI for chapter 02: ``servebook whatif`` and ``servebook engines``.

    servebook whatif --engine sglang==0.5.9 --gpu rtx-pro-6000 --model kimi-k2.5
    servebook whatif --engine transformers --model embedded --json
    servebook whatif --engine sglang --engine-python /opt/sglang/bin/python --capability 12.0 --model /models/x
    servebook engines add sglang==0.5.9
    servebook engines list
    python -m servebook.selection.cli whatif ...      # standalone
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import ServebookError

__all__ = ["register", "main"]


def register(subparsers) -> None:
    """Add ``whatif`` and ``engines`` to the main CLI's subparsers."""
    w = subparsers.add_parser("whatif", help="which attention backend an engine picks for a model on a GPU, and which rule decides")
    w.add_argument("--engine", default="transformers", help="transformers | sglang | vllm, optionally ==VERSION")
    w.add_argument("--engine-python", default=None, help="an interpreter where the engine is installed")
    g = w.add_mutually_exclusive_group()
    g.add_argument("--gpu", default=None, help="a hardware profile in data/hardware (e.g. rtx-pro-6000)")
    g.add_argument("--capability", default=None, help="a bare compute capability X.Y instead of a profile")
    w.add_argument("--model", default="embedded", help="a model card (data/models) or a model directory with config.json")
    w.add_argument("--cuda", default=None, help="the CUDA version to fake (default: the engine's own pin, see assumptions)")
    w.add_argument("--no-flashinfer", action="store_true", help="assume flashinfer is not installed")
    w.add_argument("--tree", action="store_true", help="also print the static decision tree")
    w.add_argument("--json", action="store_true", help="print the full result as JSON")
    w.set_defaults(func=_whatif)

    e = subparsers.add_parser("engines", help="prepare and list engine environments for what-if")
    esub = e.add_subparsers(dest="engines_cmd", required=True)
    a = esub.add_parser("add", help="prepare a cached environment: servebook engines add sglang==0.5.9")
    a.add_argument("spec", help="engine==VERSION")
    a.add_argument("--force", action="store_true", help="rebuild even if cached")
    a.set_defaults(func=_engines_add)
    ls = esub.add_parser("list", help="prepared environments")
    ls.set_defaults(func=_engines_list)


def _whatif(args) -> int:
    from .whatif import whatif

    r = whatif(args.engine, args.model, gpu=args.gpu, capability=args.capability, engine_python=args.engine_python,
               kernel_libs={"flashinfer": False} if args.no_flashinfer else None, cuda_version=args.cuda)
    if args.json:
        print(json.dumps(r, indent=2, default=str))
        return 0
    print(f"{r['engine']} {r['version']} | model {r['model']} ({r['architecture']}, {'MLA' if r['mla'] else 'MHA/GQA'}) | "
          f"gpu {r['gpu']} (capability {r['capability'] or 'this host'})")
    print(f"method: {r['method']}")
    if r["method"] == "dynamic":
        for k in ("attention_backend", "prefill_attention_backend", "decode_attention_backend", "moe_runner_backend"):
            if r.get(k) is not None:
                print(f"{k}: {r[k]}")
        d = r.get("decided_by")
        print(f"decided_by: {d['where']} in {d['function']} ({d['target']} = {d['value']})" if d else "decided_by: (no traced site)")
        for c in r.get("conditions", []):
            print(f"  because: {c['text']}   [{','.join(c['kinds'])}] @{c['line']}")
        for h in r.get("helper_answers", []):
            print(f"  helper: {h['helper']} -> {h['answer']!r}" + (f"  (defined at {h['defined_at']})" if h.get("defined_at") else ""))
        from .rootcause import cause_of

        c = cause_of(r)
        print(f"root cause [{c['decision']}]: {c['cause']}")
    else:
        print(f"reason: {r.get('reason')}")
        print(f"candidates ({len(r.get('candidates', []))}, read statically):")
        for c in r.get("candidates", [])[:20]:
            print(f"  {c['where']} {c['function']}: {c['value']}")
    for line in r.get("logs", []):
        print(f"engine log: {line}")
    a = r["assumptions"]
    print(f"assumptions: kernel libs {a['kernel_libs']}; CUDA {a['cuda_version']} ({a.get('cuda_source')}); stubbed {a['stubbed_modules'] or 'none'}")
    if args.tree:
        from ..engines.envs import resolve_engine
        from .static import render_tree
        from .whatif import static_reading

        print(render_tree(static_reading(resolve_engine(args.engine, args.engine_python, static=True)).attention_sites()))
    return 0


def _engines_add(args) -> int:
    from .envs import add_engine

    env = add_engine(args.spec, force=args.force)
    print(f"{env.engine} {env.version}: {env.python}")
    return 0


def _engines_list(args) -> int:
    from ..engines.envs import list_engines

    rows = list_engines()
    if not rows:
        print("no engine environments prepared; run: servebook engines add sglang==VERSION")
    for e in rows:
        state = "importable" if e.get("importable", True) else f"static only ({e.get('import_error')})"
        print(f"{e['engine']}=={e['version']}  {e['python']}  {state}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="servebook")
    register(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ServebookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
