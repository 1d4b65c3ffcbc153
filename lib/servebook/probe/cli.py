"""``servebook probe``: what this host is, and what the engines conclude about it (chapter 01).

    servebook probe                              # a readable table for this host
    servebook probe --json > probe.json          # the stable JSON schema below
    servebook probe --profile rtx-pro-6000       # the same report for a GPU from data/hardware (what-if)
    servebook probe --host replay:data/runs/h200x1-rec   # the probe a recorded run took (its probe.json), no host needed
    python -m servebook.probe.cli --json         # the same, without the servebook entry point

JSON schema ``servebook.probe/1`` (keys are only ever added; a removed or renamed key means a new schema name):

    schema            "servebook.probe/1"
    created           ISO-8601 UTC time of the probe
    host, hostname    where it was probed ("local", "ssh://...") and that machine's name
    source            "measured" (this host) | "profile" (datasheet what-if: nothing measured)
    profile           profile name or null; profile_data: the profile file's content (source "profile" only)
    gpu_count         int (0 = no GPU; the report says so in warnings[])
    gpus[]            index (as CUDA numbers it, after CUDA_VISIBLE_DEVICES), host_index (nvidia-smi's), name (as
                      nvidia-smi prints it), capability "X.Y", major, minor, sm ("sm_90"), arch ("Hopper"),
                      family ("sm_90 Hopper: H100, H200, GH200"), family_names[], datacenter (bool|null), sm_count,
                      memory_total_mib, memory_gib, memory_used_mib, utilization_pct, clocks{sm_mhz, mem_mhz,
                      max_sm_mhz, max_mem_mhz}, power_limit_w, mig_mode, ecc_mode ("Enabled"/"Disabled"/null),
                      processes, busy (bool), uuid, pci_bus_id, source ("nvml"|"nvidia-smi"|"torch"|"profile")
    versions          driver, cuda (the CUDA version the driver supports), cuda_runtime (libcudart torch loaded),
                      cuda_toolkit (nvcc, or null), torch, torch_cuda, nccl (torch.cuda.nccl.version()),
                      nccl_loaded{path, version} (the libnccl mapped in this process, asked via ncclGetVersion),
                      python, python_executable, packages{name: version|null}
    topology          source ("nvidia-smi topo -m" | "profile" | null), labels[] (GPU0.., NIC0..), row_labels[],
                      matrix[row][col] link codes (X, NV#, PIX, PXB, PHB, NODE, SYS), affinity{GPUn: {cpu_affinity,
                      numa_affinity, gpu_numa_id}}, legend{code: meaning}, nics{NICn: device}, p2p_read (parsed
                      `nvidia-smi topo -p2p r`), raw (the text), note
    p2p               access[i][j] (torch.cuda.can_device_access_peer; null on the diagonal), pairs[] {src, dst,
                      bytes, iters, time_ms, bandwidth_gbs (1e9 B/s, one way), latency_us, peer_access} or
                      {src, dst, error}, measured (bool), method (how it was measured, in words), note
    env               NCCL_*, CUDA_*, TORCH_*, PYTORCH_*, SGLANG_*, VLLM_*, HF_*, NVSHMEM_* (secrets shown as ***)
    engines[]         engine, version (null = not installed), status ("ok" | "not installed" | "import failed" |
                      "error"), error, python, python_version, torch, capability_seen, patched[] (what-if fakes),
                      helpers[] {name, answer, error, expected, verdict ("agrees" | "mismatch" | "gap" |
                      "unknown" | "error"), meaning}, mismatches[] and gaps[] (sentences)
    fake              (source "profile") the capability, name, count and CUDA version faked in engine subprocesses
    tools             method used for GPUs ("nvml" | "nvidia-smi" | "torch" | "profile" | null), errors[], nvidia_smi path
    warnings[]        plain sentences: no GPU, MIG, busy GPUs, engines that failed, helper mismatches and gaps
    elapsed_s         seconds the probe took

Exit status: 0 with a report (also when there is no GPU), 2 for bad input (one line saying what to do).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import ServebookError

__all__ = ["register", "main", "run"]


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="local", help="host to probe: local, ssh://[user@]host[:port], or replay:RUN_DIR for the probe that run recorded (default: local)")
    p.add_argument("--profile", default="", help="a hardware profile in data/hardware for a what-if, e.g. rtx-pro-6000")
    p.add_argument("--json", action="store_true", help="print the report as JSON (schema servebook.probe/1)")
    p.add_argument("--engine", action="append", default=None, metavar="NAME",
                   help="engines to ask (repeatable; default: transformers, sglang, vllm)")
    p.add_argument("--engine-python", default=None, metavar="PATH",
                   help="the interpreter where the engines are installed (default: this one)")
    p.add_argument("--gpus", type=int, default=None, help="GPU count for a --profile what-if (default 8)")
    p.add_argument("--no-p2p", action="store_true", help="skip the P2P copy measurement")


def _recorded(args: argparse.Namespace) -> dict | None:
    """``--host replay:RUN_DIR``: the probe that run recorded (its ``probe.json``, chapter 01's report), as it was
    taken; None where the run kept no probe.json (its cassette is then asked, as for the book)."""
    from pathlib import Path

    from ..errors import ParameterError

    if not args.host.startswith("replay:"):
        return None
    path = Path(args.host[len("replay:"):]) / "probe.json"
    if not path.is_file():
        return None
    changed = [f"--{k.replace('_', '-')}" for k in ("profile", "engine", "engine_python", "gpus", "no_p2p")
               if getattr(args, k) not in (None, "", False)]
    if changed:
        raise ParameterError("host", args.host, f"a replay prints the probe {path.parent} recorded, as it was taken; drop {', '.join(changed)}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ParameterError("host", args.host, f"{path} is not a probe report ({exc}); record the run again") from None


def run(args: argparse.Namespace) -> int:
    from ..errors import ParameterError
    from . import format_report, probe

    if args.gpus is not None and args.gpus < 1:
        raise ParameterError("gpus", args.gpus, "give a GPU count of 1 or more")
    report = _recorded(args)
    if report is None:
        engines = tuple(e.strip().lower() for e in args.engine) if args.engine else None
        kwargs = {"host": args.host, "python": args.engine_python, "measure_p2p": not args.no_p2p, "gpu_count": args.gpus}
        if engines:
            kwargs["engines"] = engines
        report = probe(args.profile or None, **kwargs)
    if args.json:
        json.dump(report, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``probe`` to the ``servebook`` command (called by servebook.cli)."""
    p = subparsers.add_parser("probe", help="detect GPUs, versions, topology and what the engines conclude (chapter 01)",
                              description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    p.set_defaults(func=run)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="servebook probe", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ServebookError as exc:
        print(f"servebook: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
