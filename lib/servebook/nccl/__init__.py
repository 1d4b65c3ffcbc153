"""Chapter 04: all-reduce latency at the model's real decode message sizes, over a grid of NCCL settings.

    dims = model_dims(card["config"])                      # hidden size, layers (text_config aware)
    sizes = message_sizes(dims["hidden_size"], batches=[1, 8, 64])
    grid = parse_grid("NCCL_PROTO=LL;NCCL_PROTO=LL128,NCCL_ALGO=Ring")
    result = run_grid(store, sizes, builtin_grid() + grid, timeout_s=120)

Method. Every setting is one bounded ``torchrun`` launch (one process per GPU, NCCL bound to
its device with ``device_id``; a worker writes its rows after every size and leaves with
``os._exit`` because teardown can hang). Per message size it checks the sum (eagerly and
through a captured graph), then times

* ``graph``: ``iters`` all-reduces captured into one CUDA graph, the graph launched
  ``launches`` times back to back after a barrier; per-call time = elapsed / (iters x launches),
  from CUDA events on rank 0's stream and from the host clock (the nccl-tests ``-G`` method);
* ``eager``: a Python loop of calls (includes launch overhead).

Three paths share that method, so their difference is the finding:

* ``torch``: ``torch.distributed.all_reduce`` through ProcessGroupNCCL (what engines call);
* ``raw-per-process``: ``ncclAllReduce`` through CuPy's bindings on torch's stream, same
  processes (isolates what ProcessGroupNCCL adds);
* ``raw-single-process``: one process drives every GPU (``ncclCommInitAll``, group calls,
  one graph per GPU), the shape of nccl-tests ``all_reduce_perf -g N -G``.

``NCCL_DEBUG=INFO`` is written to a file per process and parsed for the algorithm and
protocol NCCL actually chose (its ``AllReduce: N Bytes -> Algo X proto Y`` lines). A setting
that fails, hangs, or returns a wrong sum is recorded as such; the grid goes on.
Without two CUDA GPUs the torch path runs with gloo on the CPU, labelled so.

On a ``host`` that is not this process (``servebook.hosts``: SSH, or a recording), every launch
runs there: ``run_grid(..., host=h)`` calls this module's launchers on the host (servebook travels
with each call, workers included), bounded by the same timeout, torchrun in its own process group
that is stopped on timeout or when the call is stopped; only result rows and NCCL's debug lines
come back. ``available_backend(h)`` and ``find_all_reduce_perf(path, h)`` ask the host.

A host's policy env (``servebook.hosts.host_policy_env``, e.g. ``NCCL_NVLS_ENABLE=0`` on the lent machines) goes
with every launch and into the run's manifest; it is never part of a setting or a recommendation.

Modules: ``sizes`` (message sizes), ``grid`` (settings), ``debug`` (NCCL_DEBUG parsing), ``launch`` (one bounded
launch; workers in ``workers/``), ``runner`` (the grid), ``predict`` (per-token time, recommendation), ``cli``;
chapter 04's page: ``figures`` (what the page states, computed from the tables; ``servebook.stated`` recomputes it) and
``report`` (its tables, plot and sentences, tagged).
"""

from __future__ import annotations

from .cli import main
from .debug import debug_excerpt, parse_nccl_debug
from .grid import KNOWN_VARS, SEED_RECIPE, Setting, builtin_grid, parse_grid
from .launch import _hosted  # the host-side entry point, also as servebook.nccl:_hosted
from .launch import (allreduce_bench, available_backend, find_all_reduce_perf, parse_all_reduce_perf, run_all_reduce_perf,
                     single_process_bench)
from .predict import env_block, per_token_prediction, recommend
from .runner import run_grid
from .sizes import STANDARD_SWEEP, decode_message_sizes, message_sizes, model_dims, nccl_tests_command

__all__ = [
    "decode_message_sizes", "message_sizes", "model_dims", "nccl_tests_command", "available_backend", "allreduce_bench",
    "parse_grid", "builtin_grid", "Setting", "parse_nccl_debug", "run_grid", "find_all_reduce_perf",
    "run_all_reduce_perf", "per_token_prediction", "recommend", "env_block", "STANDARD_SWEEP",
    "single_process_bench", "parse_all_reduce_perf", "debug_excerpt", "KNOWN_VARS", "SEED_RECIPE", "main",
]
