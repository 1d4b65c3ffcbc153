"""Chapter 01: what this host is, and what the engines conclude about it.

    report = probe()                         # this host: GPUs, versions, topology, P2P, env, engine helpers
    report = probe(profile="rtx-pro-6000")   # the same report for a GPU you do not have (source: "profile")
    print(format_report(report))             # a readable table
    describe_host(report)                    # "What this host is", one paragraph generated from the data
    findings(report)                         # the engine answers that disagree with the hardware, in words
    say_helper_verdicts(rows, engines)       # the helpers asked and judged, each gap or mismatch in the chapter's words

Truth comes from the hardware (NVML, nvidia-smi as fallback, torch for SM counts and P2P), and each
engine's conclusions come from the engine's own helpers, called in the engine's own interpreter.

Modules: ``collect`` (``probe()``), ``gpus``, ``versions`` (versions, topology, P2P, env), ``parse`` (nvidia-smi
output), ``engines`` (the engines' helpers, asked by ``scripts/engine_helpers.py``), ``verdicts`` (helper answers
judged against the hardware), ``text`` (the report in words and tables), ``common``.
"""

from __future__ import annotations

from .collect import _probe_on_host, probe
from .common import ENGINE_NAMES, ENV_PREFIXES, PACKAGES, SCHEMA
from .engines import _ask_engines, engine_helpers
from .gpus import _QUERY, _finish_gpu, detect_gpus
from .parse import describe_link, link_rank, parse_query_csv, parse_smi_xml, parse_topo_matrix, parse_topo_p2p
from .text import describe_host, findings, format_report, record, say_helper_verdicts
from .verdicts import judge_helper
from .versions import _restrict_topology, collect_env, detect_p2p, detect_topology, detect_versions

__all__ = [
    "SCHEMA",
    "ENGINE_NAMES",
    "PACKAGES",
    "ENV_PREFIXES",
    "probe",
    "detect_gpus",
    "detect_versions",
    "detect_topology",
    "detect_p2p",
    "collect_env",
    "engine_helpers",
    "judge_helper",
    "parse_query_csv",
    "parse_topo_matrix",
    "parse_topo_p2p",
    "parse_smi_xml",
    "link_rank",
    "describe_link",
    "format_report",
    "describe_host",
    "findings",
    "say_helper_verdicts",
    "record",
]
