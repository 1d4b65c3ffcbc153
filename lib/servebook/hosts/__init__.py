"""Where the book's probes, engines and benchmarks run: this machine, a remote host over SSH, or a recording.

    h = get_host("local")                                   # this machine
    h = get_host("ssh://me@gpu-box:2222")                   # a remote host (keys, agent, ~/.ssh/config, jump hosts)
    h = get_host("replay:runs/ssh-me-gpu-box/20261129T...")  # a recorded run's answers, no host at all
    h = get_host("local", run_dir=store.path)               # records into the run's cassette when the run records

    h.run(["nvidia-smi", "-L"]); h.python("print(1)"); h.call("servebook.probe:probe", {...})
    with h.serve(launch, log_path=...) as srv: ...          # a server on the host, stopped on every path

The notebooks run where you are; every command, engine and benchmark client runs on the host.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ParameterError
from ._base import Host
from ._cassette import CASSETTE, RecordingHost, ReplayHost, is_recording, start_recording
from ._local import LocalHost
from ._policy import HOST_POLICY_VAR, host_policy_env
from ._types import Completed, HostError, HostProcess

__all__ = ["get_host", "check_host", "model_on_host", "Host", "HostError", "HostProcess", "Completed", "LocalHost", "ReplayHost",
           "RecordingHost", "CASSETTE", "start_recording", "is_recording", "host_policy_env", "HOST_POLICY_VAR"]

_OPEN: dict[tuple, Host] = {}


def check_host(spec: str) -> None:
    """Validate a host string without connecting (ParameterError naming the valid forms)."""
    if spec in ("", "local"):
        return
    if spec.startswith("ssh://"):
        from ._ssh import parse_ssh

        parse_ssh(spec)
        return
    if spec.startswith("replay:"):
        path = Path(spec[len("replay:"):]).expanduser()
        if not (path / CASSETTE).exists():
            raise ParameterError("host", spec, f"no {CASSETTE} in {path}; give replay:RUN_DIR of a run made with --record")
        return
    raise ParameterError("host", spec, "valid hosts: 'local', 'ssh://[user@]host[:port]' or 'replay:RUN_DIR'")


def get_host(spec: str = "local", run_dir: str | Path | None = None) -> Host:
    """The host for ``spec``; when ``run_dir`` is recording (``servebook book --record``), a recording of it.

    One connection per spec and run directory is kept for the process (a notebook kernel).
    """
    check_host(spec)
    recording = is_recording(run_dir) and not spec.startswith("replay:")
    key = (spec or "local", str(run_dir) if recording else None)
    if key in _OPEN:
        return _OPEN[key]
    if spec.startswith("replay:"):
        host: Host = ReplayHost(Path(spec[len("replay:"):]).expanduser())
    elif spec.startswith("ssh://"):
        from ._ssh import SSHHost

        host = SSHHost(spec)
    else:
        host = LocalHost()
    if recording:
        host = RecordingHost(host, run_dir)
    _OPEN[key] = host
    return host


def model_on_host(host: Host, model: str, local_dir) -> str:
    """The model directory as the host sees it: on an SSH host 'embedded' is built there (by servebook's
    own builder, under the host's interpreter); another model must be a directory on the host."""
    if getattr(getattr(host, "inner", host), "separate_files", False):
        if model == "embedded":
            return str(host.call("servebook.embedded:build_embedded_model", {}, timeout=900, label="embedded model"))
        return model
    return str(local_dir)
