"""Masking by value: what is registered at launch (and what never is), references that keep secrets out of
notebooks, notebooks masked as papermill writes them, generated secrets that reach no file of a run, and the
committed runs left exactly as they are."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servebook.secret_refs import hide_secrets, mask_known, mask_notebook, masked_notebook_writes, resolve_refs
from servebook.secrets import (MASK, argv_secret_values, copy_masked, credential_values, is_credential_name, mask_argv,
                               mask_env, mask_text, mask_value, register, registered)

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "data" / "runs"


# -- what is registered ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["MY_SERVICE_TOKEN", "DB_PASS", "db_pwd", "SvcSessionCookie", "x-auth-header", "AWS_SECRET",
                                  "GCP_CREDS", "apiKey", "SESSIONID", "--upstream-pass-phrase", "--ssl-keyfile", "OPENAI_API_KEY"])
def test_credential_names_of_every_spelling(name):
    assert is_credential_name(name)


@pytest.mark.parametrize("name", ["max_tokens", "ceiling_tokens", "prompt_tokens", "--max-num-batched-tokens", "--tokenizer",
                                  "tokenizer_mode", "PWD", "OLDPWD", "XDG_SESSION_TYPE", "DESKTOP_SESSION", "SSH_AUTH_SOCK",
                                  "author", "NCCL_PROTO", "CUDA_VISIBLE_DEVICES", "engine_args", "model", "keyboard_layout"])
def test_names_that_are_no_credential(name):
    assert not is_credential_name(name)


def test_no_parameter_of_the_book_is_a_credential_name():
    """The book's own parameters (max_tokens, ceiling_tokens, engine_args, ...) are never registered by their name."""
    from servebook.params import PARAMS

    names = set(PARAMS)
    for path in sorted((ROOT / "notebooks").glob("0*.py")):
        cell = re.search(r'# %% tags=\["parameters"\]\n(.*?)\n# %%', path.read_text(), re.S)
        names |= set(re.findall(r"^(\w+)\s*[:=]", cell.group(1), re.M))
    assert {"max_tokens", "ceiling_tokens", "engine_args"} <= names
    assert not [n for n in names if is_credential_name(n)]


def test_only_strings_that_can_be_secrets_are_registered():
    env = {"MY_SERVICE_TOKEN": "svcTok-1234", "DB_PASS": "12345678", "AUTH_ENABLED": "true", "SESSION_KEY": "None",
           "XDG_SESSION_TYPE": "wayland", "DESKTOP_SESSION": "ubuntu", "COOKIE_MODE": "strict", "API_KEY": "",
           "HF_ENDPOINT": "https://me:endpointPw-5@hf.internal/", "max_tokens": "64", "PASS_RATE": "0.95"}
    assert credential_values(env) == ["endpointPw-5", "svcTok-1234"]
    argv = ["vllm", "serve", "/m", "--max-num-batched-tokens", "8192", "--tokenizer", "/m/tok", "--auth-token=at-1234",
            "--my-cred", "credVal-9", "--enable-auth", "--port", "8000", "--hf-token", "hf_abcdefgh1234"]
    assert argv_secret_values(argv) == ["at-1234", "credVal-9", "hf_abcdefgh1234"]


def test_a_registered_value_is_masked_in_every_spelling_and_across_wraps_and_colour_codes():
    secret = "reg/Val@ue-7&<x>"
    register(secret)
    values = registered()
    assert secret in values
    text = (f"plain {secret}; json {json.dumps(secret)}; html &lt;{secret.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')}; "
            f"url {urllib.parse.quote(secret, safe='')}\n"
            f"wrapped reg/Val\n    @ue-7&<x> and coloured \x1b[31mreg/Va\x1b[0ml@ue-7&<x>\x1b[0m")
    masked = mask_text(text)
    assert "reg/Va" not in masked and "ue-7" not in masked and masked.count(MASK) == 6, masked
    assert masked.count("\n") == text.count("\n")  # a wrap masked keeps its line break


def test_numbers_booleans_and_book_parameters_are_never_registered():
    register("64", "0.95", "true", "None", "8000", "1e-4", "12GB")
    assert not [v for v in registered() if v in ("64", "0.95", "true", "None", "8000", "1e-4", "12GB")]
    row = {"max_tokens": 64, "ceiling_tokens": 4096, "tok_s": 81.5, "ok": True, "port": 8000, "note": "8000 tokens in 64 s"}
    assert mask_value(row) == row


# -- references keep secrets out of the notebooks ---------------------------------------------------------------------
def test_parameters_carry_references_and_launches_resolve_them(monkeypatch):
    for k in [k for k in os.environ if k.startswith("SERVEBOOK_SECRET_")]:
        monkeypatch.delenv(k)
    params = {"engine_args": "sglang: --api-key 'sg Key-1'; vllm: --my-auth-thing=vlAuth-2 --max-num-seqs 16",
              "tp_engine_args": "--hf-token hf_refToken12345", "max_tokens": 64, "model": "/models/tiny"}
    hidden = hide_secrets(params)
    assert hidden["max_tokens"] == 64 and hidden["model"] == "/models/tiny"
    blob = json.dumps(hidden)
    assert not [s for s in ("sg Key-1", "vlAuth-2", "hf_refToken12345") if s in blob], blob
    assert "--max-num-seqs 16" in hidden["engine_args"] and "${SERVEBOOK_SECRET_" in hidden["engine_args"]
    from servebook.engines import args_for

    words = args_for(hidden["engine_args"], "vllm")
    assert resolve_refs(words) == ["--my-auth-thing=vlAuth-2", "--max-num-seqs", "16"]
    assert resolve_refs(args_for(hidden["engine_args"], "sglang")) == ["--api-key", "sg Key-1"]
    assert hide_secrets(params) == hidden  # the same secret, the same reference
    # the kernel inherits the variables: there, the values are registered and masked too
    code = "import json, sys; from servebook.secrets import registered; print(json.dumps(registered()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT / "lib")))
    assert {"sg Key-1", "vlAuth-2", "hf_refToken12345"} <= set(json.loads(out.stdout))
    from servebook.errors import ParameterError

    monkeypatch.delenv(next(k for k in os.environ if k.startswith("SERVEBOOK_SECRET_")))
    with pytest.raises(ParameterError, match="run the chapter through servebook book"):
        resolve_refs(args_for(hidden["engine_args"], "sglang") + args_for(hidden["engine_args"], "vllm") + ["${SERVEBOOK_SECRET_99}"])


def test_a_notebook_is_masked_in_cells_outputs_and_metadata_images_kept():
    import nbformat

    register("nbSecret-31")
    nb = nbformat.v4.new_notebook(metadata={"papermill": {"parameters": {"engine_args": "--api-key nbSecret-31"}}})
    nb.cells = [nbformat.v4.new_code_cell("engine_args = '--foo nbSecret-31'", metadata={"tags": ["injected-parameters"]})]
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="launch --x nbSecret-31\n"),
                           nbformat.v4.new_output("execute_result", data={"text/plain": "'nbSecret-31'", "text/html": "<b>nbSecret-31</b>",
                                                                          "image/png": "iVBORw0KGgoAAAANSUhEUgnbSecret"}),
                           nbformat.v4.new_output("error", ename="E", evalue="bad nbSecret-31", traceback=["\x1b[31mnbSecret-31\x1b[0m"])]
    masked = mask_notebook(copy.deepcopy(nb))
    assert "nbSecret-31" not in json.dumps(masked) and "tags" in masked.cells[0].metadata
    assert masked.cells[0].outputs[1]["data"]["image/png"] == "iVBORw0KGgoAAAANSUhEUgnbSecret"
    assert mask_known("<p>nbSecret-31 &amp; x</p>") == "<p>*** &amp; x</p>"


_KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
           "language_info": {"name": "python"}}


@pytest.mark.timeout(120)
def test_papermill_never_writes_a_secret_the_notebook_prints_at_any_moment(tmp_path):
    """A chapter that prints the secret it was handed: every save papermill makes while the cells run is masked."""
    import nbformat
    import papermill

    register("printedSecret-41")
    os.environ["SB_TEST_PRINTED_TOKEN"] = "printedSecret-41"
    try:
        nb = nbformat.v4.new_notebook(metadata=_KERNEL)
        nb.cells = [nbformat.v4.new_code_cell("x = ''", metadata={"tags": ["parameters"]}),
                    nbformat.v4.new_code_cell("import os, time\nprint(os.environ['SB_TEST_PRINTED_TOKEN'], x)\ntime.sleep(1)"),
                    nbformat.v4.new_code_cell("v = os.environ['SB_TEST_PRINTED_TOKEN']\nprint('wrap', v[:10] + '\\n  ' + v[10:]); time.sleep(1)"),
                    nbformat.v4.new_code_cell("raise ValueError(os.environ['SB_TEST_PRINTED_TOKEN'])")]
        source, target = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
        nbformat.write(nb, source)
        seen, stop = [], threading.Event()

        def watch():
            while not stop.is_set():
                if target.exists():
                    seen.append(target.read_text())
                time.sleep(0.05)

        th = threading.Thread(target=watch)
        th.start()
        try:
            with masked_notebook_writes(target), pytest.raises(papermill.PapermillExecutionError):
                papermill.execute_notebook(str(source), str(target), parameters={"x": "printedSecret-41"}, kernel_name="python3",
                                           progress_bar=False)
        finally:
            stop.set()
            th.join()
        seen.append(target.read_text())
        leaked = [s[max(0, s.find("printedSec") - 300):s.find("printedSec") + 80] for s in seen if "printedSec" in s or "ret-41" in s]
        assert len(seen) > 3 and not leaked, leaked[:1]
        assert "ValueError" in seen[-1] and MASK in seen[-1]
    finally:
        del os.environ["SB_TEST_PRINTED_TOKEN"]


# -- generated secrets: none survives ------------------------------------------------------------------------------
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
# secrets: letters and digits with the punctuation passwords hold (/ @ : in URL passwords), never a number
# (6 different characters or more in each half: a half that a page holds anyway, "00000" in a stylesheet, proves nothing)
_distinct = lambda s: len(set(s[:len(s) // 2])) >= 6 and len(set(s[len(s) // 2:])) >= 6  # noqa: E731
_secret = st.text(_ALNUM + "-_.+=~!%^*/@:", min_size=12, max_size=40).filter(
    lambda s: re.search(r"[A-Za-z]", s) and re.search(r"\d", s) and s[0] not in "-/@:" and s[-1] not in "@:" and _distinct(s))
_plain = st.text(_ALNUM, min_size=12, max_size=40).filter(lambda s: re.search(r"[A-Za-z]", s) and re.search(r"\d", s) and _distinct(s))
_word = st.sampled_from(["key", "token", "secret", "pass", "pwd", "cred", "auth", "cookie", "session", "password", "passwd",
                         "apikey", "credentials", "passphrase", "sessionid", "authkey"])
_other = st.sampled_from(["my", "svc", "db", "upstream", "internal", "x", "gcp", "openai", "hub", "proxy"])


def _spell(parts: list[str], how: str) -> str:
    return {"UPPER": "_".join(parts).upper(), "snake": "_".join(parts), "kebab": "-".join(parts),
            "camel": parts[0] + "".join(p.capitalize() for p in parts[1:]), "Pascal": "".join(p.capitalize() for p in parts)}[how]


_name = st.builds(lambda a, w, b, how: _spell([x for x in (a, w, b) if x], how), _other, _word,
                  st.sampled_from(["", "value", "v2", "id"]), st.sampled_from(["UPPER", "snake", "kebab", "camel", "Pascal"]))
_shapes = st.sampled_from([
    lambda s: f"ghp_{s}", lambda s: f"gho_{s}", lambda s: f"github_pat_11{s}", lambda s: f"xoxb-12-{s}", lambda s: f"xoxp-{s}",
    lambda s: f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIi{s}.{s[::-1]}", lambda s: f"hf_{s}", lambda s: f"sk-{s}"])
_seen_forms = st.sampled_from([  # an unregistered value the engine prints under a name it shows
    lambda s: f"curl -H 'X-Api-Key: {s}'", lambda s: f"X-Auth-Token: {s}", lambda s: f"Cookie: sid={s}; theme=dark",
    lambda s: f'Authorization: Digest username="u", response="{s}"', lambda s: f"Authorization: Basic {s}",
    lambda s: f"GET /v1/x?key={s}&alt=json", lambda s: f"https://h/x?a=1&api_key={s}", lambda s: f"api_key='{s}'",
    lambda s: f'{{"password": "{s}"}}', lambda s: f"--api-key {s}", lambda s: f"Bearer {s}", lambda s: f"token={s}",
    lambda s: f"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE{s[:6]}\n{s}\n-----END EC PRIVATE KEY-----"])


def _printed(env_secrets: dict, opt_secrets: dict, url_pw: str, empty_user: bool) -> str:
    """What an engine prints: registered values bare, wrapped and coloured, URL passwords, ... (one per line)."""
    lines = []
    for v in list(env_secrets.values()) + list(opt_secrets.values()):
        half = len(v) // 2
        lines += [f"value {v} end", f"wrapped {v[:half]}", f"    {v[half:]}", f"coloured \x1b[1m{v[:half]}\x1b[0m{v[half:]}\x1b[0m"]
    user = "" if empty_user else "me"
    lines.append(f"connecting to postgres://{user}:{url_pw}@db.local:5432/x")
    return "\n".join(lines) + "\n"


def _pieces(secret: str) -> list[str]:
    """The parts of ``secret`` that must not survive either: its halves (a wrap or a colour code cut it there)."""
    half = len(secret) // 2
    return [secret, secret[:half], secret[half:]]


def _leaks(text: str, secrets: list[str], split: list[str] | None = None) -> list[str]:
    """The ``secrets`` found whole in ``text``, and those of ``split`` (default: all) found by a half too."""
    split = secrets if split is None else split
    return [s for s in secrets if s in text] + [s for s in split for p in _pieces(s)[1:] if len(p) >= 6 and p in text]


def _through_copier(data: bytes, cuts: list[int], tmp: Path) -> str:
    """``data`` through ``copy_masked`` (this process's registered values) written in pieces cut at ``cuts``."""
    log = tmp / f"log-{time.monotonic_ns()}"
    r, w = os.pipe()
    th = threading.Thread(target=copy_masked, args=(r, str(log)), kwargs={"max_line": 4096})
    th.start()
    at = 0
    for cut in sorted(set(c % max(1, len(data)) for c in cuts)) + [len(data)]:
        if cut > at:
            os.write(w, data[at:cut])
            at = cut
    os.close(w)
    th.join(30)
    os.close(r)
    return log.read_text()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(env=st.dictionaries(_name, _secret, min_size=1, max_size=3), opts=st.dictionaries(_name, _secret, min_size=1, max_size=2),
       url_pw=_secret, empty_user=st.booleans(), shaped=st.lists(st.tuples(_shapes, _plain), min_size=1, max_size=3),
       seen=st.lists(st.tuples(_seen_forms, _plain), min_size=1, max_size=3), cuts=st.lists(st.integers(0, 10**6), max_size=6),
       filler=st.integers(0, 9000))
def test_generated_secrets_reach_no_log_row_or_argv(tmp_path, env, opts, url_pw, empty_user, shaped, seen, cuts, filler):
    """Secrets under credential names of every spelling (registered at launch, as ``Server.spawn`` does), URL passwords,
    token shapes and auth forms the book never saw: none survives the log copier (any write boundaries, a line over its
    cut length), a table row, an argv or an environment as recorded."""
    argv = ["engine", "--port", "1"]
    for name, value in opts.items():
        argv += [f"--{name.lower()}", value] if len(argv) % 2 else [f"--{name.lower()}={value}"]
    argv.append(f"--db-url=mysql://me:{url_pw}@db/x")
    register(*argv_secret_values(argv), *credential_values(env))
    unseen = [f(s) for f, s in shaped]
    secrets = list(env.values()) + list(opts.values()) + [url_pw] + [f(s) for f, s in shaped] + [s for _, s in seen]
    text = _printed(env, opts, url_pw, empty_user) + " ".join(unseen) + "\n" + "\n".join(f(s) for f, s in seen) + "\n"
    text = "x " * filler + text  # a long first line, so the copier cuts some lines
    wrapped = list(env.values()) + list(opts.values())  # printed cut in two too
    assert not _leaks(_through_copier(text.encode(), cuts, tmp_path), secrets, wrapped)
    assert not _leaks(mask_text(text), secrets, wrapped)
    row = mask_value({"argv": argv, "env": env, "launch": " ".join(argv), "log": text.splitlines(), "n": 3})
    assert not _leaks(json.dumps(row), secrets, wrapped) and row["n"] == 3
    assert not _leaks(json.dumps(mask_argv(argv)), secrets) and not _leaks(json.dumps(mask_env(env)), secrets)


# -- a run of the book's real components: parameters, a server, tables, a notebook, the rendered page ----------------------
_PRINTER = """
import http.server, os, sys
port = int(sys.argv[1])
print('argv', ' '.join(sys.argv[2:]), flush=True)
for name, value in os.environ.items():
    if name.startswith('SBT_'):
        h = len(value) // 2
        print('env', value, 'wrapped', value[:h], flush=True); print('   ', value[h:], flush=True)
print('READY', flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(('127.0.0.1', port), H).serve_forever()
"""


def _scan(root: Path, secrets: list[str]) -> list[tuple[str, str]]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", errors="replace")
            found += [(str(path.relative_to(root)), s) for s in _leaks(text, secrets)]
    return found


@pytest.mark.timeout(300)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(env=st.dictionaries(_name, _plain, min_size=1, max_size=2), opt=_name, opt_value=_secret, url_pw=_secret)
def test_generated_secrets_reach_no_file_of_a_run(tmp_path_factory, env, opt, opt_value, url_pw):
    """A secret in the book's environment (a credential name of any spelling) and one in ``-p engine_args`` (an
    option of any spelling, a URL password): the parameters hold references; the server gets the values and prints them
    (plain, wrapped); the run's tables, manifest, server log, servers.jsonl, the executed notebook (papermill's cell, its
    metadata, the outputs, every save while it ran) and the rendered page hold none of them, at any moment."""
    import nbformat
    import papermill

    from servebook.render import render_book
    from servebook.engines import args_for
    from servebook.results import RunStore
    from servebook.processes import free_port
    from servebook.servers import Launch, Server

    root = tmp_path_factory.mktemp("run")
    names = {f"SBT_{k}": v for k, v in env.items()}
    secrets = list(names.values()) + [opt_value, url_pw]
    before = dict(os.environ)
    os.environ.update(names)
    try:
        params = hide_secrets({"engine_args": f"--{opt.lower()} {opt_value} --upstream=redis://:{url_pw}@cache:6379",
                               "max_tokens": 64})
        store = RunStore.at(root / "runs" / "r")
        store.write_manifest({"parameters": params})
        extra = args_for(params["engine_args"], "transformers")
        port = free_port()
        launch = Launch(cmd=[sys.executable, "-c", _PRINTER, str(port), *extra], port=port, ready_path="/", engine="printer")
        log = store.path / "logs" / "printer.log"
        with Server.start(launch, log, ready_timeout=30, registry=store.path / "servers.jsonl", progress=None):
            deadline = time.monotonic() + 10
            while "READY" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "READY" in log.read_text() and not _scan(root, secrets)  # while the server runs
            store.append("backends", {"launch": launch.shell(), "argv": launch.cmd, "extra": extra, "tok_s": 81.5})
        assert opt_value not in log.read_text() and log.read_text().count(MASK) >= 3
        # a chapter that prints what it was handed, and the environment
        nb = nbformat.v4.new_notebook(metadata=_KERNEL)
        nb.cells = [nbformat.v4.new_code_cell("engine_args = ''", metadata={"tags": ["parameters"]}),
                    nbformat.v4.new_code_cell("import os\nfrom servebook.secret_refs import resolve_refs\nfrom servebook.engines import args_for\n"
                                              "print(resolve_refs(args_for(engine_args, 'transformers')))\n"
                                              "print({k: v for k, v in os.environ.items() if k.startswith('SBT_')})")]
        source, target = root / "in.ipynb", store.path / "notebooks" / "01_detect_capabilities.ipynb"
        target.parent.mkdir(parents=True)
        nbformat.write(nb, source)
        with masked_notebook_writes(target):
            papermill.execute_notebook(str(source), str(target), parameters={"engine_args": params["engine_args"]},
                                       kernel_name="python3", progress_bar=False, cwd=str(ROOT))
        assert "${SERVEBOOK_SECRET_" in params["engine_args"] and MASK in target.read_text()
        render_book(store.path, root / "site")
        assert (root / "site" / "01_detect_capabilities.html").exists()
        assert not _scan(root, secrets)
    finally:
        os.environ.clear()
        os.environ.update(before)


# -- no false positives: the committed runs survive masking unchanged -----------------------------------------------
def _leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def _run_documents():
    for path in sorted(RUNS.rglob("*")):
        if path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                try:
                    yield path, json.loads(line)
                except ValueError:
                    continue
        elif path.suffix == ".json":
            yield path, json.loads(path.read_text())


def test_every_field_of_the_committed_runs_survives_masking_unchanged(monkeypatch):
    """Every table row, manifest, probe and cassette of data/runs masked with the values a launch registers from the
    run's own parameters and commands: every number (and boolean) unchanged, and, as these were masked when recorded,
    every string too. The runs' parameters (max_tokens, ceiling_tokens, ...) and numbers are never registered."""
    docs = list(_run_documents())
    assert len(docs) > 1000
    registered_here = set()
    for path, doc in docs:
        if path.name == "manifest.json":
            params = doc.get("parameters") or {}
            registered_here |= set(credential_values({k: str(v) for k, v in params.items()}))
        for _, leaf in _leaves(doc):
            if isinstance(leaf, str) and leaf.count(" --") >= 1 and len(leaf) < 4000:
                registered_here |= set(argv_secret_values(leaf.split()))
    assert not [v for v in registered_here if re.fullmatch(r"[-+]?[\d.]+(e[-+]?\d+)?", v, re.I)]
    values = sorted(registered_here | {"decoySecret-9f3a1c"}, key=len, reverse=True)
    numbers = changed = 0
    for path, doc in docs:
        masked = mask_value(doc, values)
        for (p, a), (q, b) in zip(_leaves(doc), _leaves(masked)):
            assert p == q
            if isinstance(a, (int, float, bool)) or a is None:
                numbers += 1
                assert b == a and type(b) is type(a), (path.name, p, a, b)
            elif a != b:
                changed += 1
                print("changed:", path.relative_to(RUNS), p, repr(a)[:120], "->", repr(b)[:120])
    assert numbers > 10000 and changed == 0


def test_the_committed_notebooks_and_logs_survive_masking_unchanged():
    """What the rendered pages show (the executed notebooks) and the server logs: no pattern masks ordinary prose."""
    notebooks = sorted(RUNS.rglob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        nb = json.loads(path.read_text())
        assert mask_notebook(copy.deepcopy(nb)) == nb, path
    for path in sorted(RUNS.rglob("*.log")):
        text = path.read_text(errors="replace")
        assert mask_text(text, []) == text, path


# -- the whole book: a secret in -p engine_args and in the environment -------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_book_given_secrets_writes_none_of_them(tmp_path, embedded_model, no_engine_envs):
    """`servebook book --smoke --only 01,05` with a credential in ``-p engine_args`` (a known and an unknown option name)
    and in the environment (another spelling, and HF_ENDPOINT with an empty user and @ and / in its password): the
    server is started with the values (transformers serve refuses --api-key: the recorded failure names the option),
    and no file of the run, its notebooks or the rendered book holds one."""
    secrets = {"api key option": "bookApiKey-5151", "unknown option": "bookAuth-5252", "environment": "bookEnvTok-5353",
               "endpoint password": "bookEndpoint@Pw/5454"}
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"), MY_SERVICE_TOKEN=secrets["environment"], HF_HUB_OFFLINE="1",
               HF_ENDPOINT=f"https://:{secrets['endpoint password']}@hf.local/")
    args = f"--api-key {secrets['api key option']} --upstream-auth-thing={secrets['unknown option']}"
    res = subprocess.run([sys.executable, "-m", "servebook.cli", "book", "--smoke", "--only", "01,05", "--run-id", "secrets",
                          "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "site"), "-p", f"engine_args={args}",
                          "-p", "max_tokens=8", "-p", "runs=1"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=540)
    # transformers serve refuses --api-key, so chapter 05 measures nothing and is recorded failed (issue #38: never "ok")
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert res.returncode == 0 or "failed: 05_benchmark_single_stream" in res.stderr, res.stderr[-3000:]
    found = [(n, s) for n, s in _scan(tmp_path, list(secrets.values()))]
    found += [("stdout", s) for s in secrets.values() if s in res.stdout + res.stderr]
    assert not found, found
    run = next((tmp_path / "runs").glob("*/secrets"))
    nb = (run / "notebooks" / "05_benchmark_single_stream.ipynb").read_text()
    assert "--upstream-auth-thing=${SERVEBOOK_SECRET_" in nb and "--api-key ${SERVEBOOK_SECRET_" in nb  # references, not values
    log = next(run.glob("server-transformers*.log")).read_text()
    assert "No such option '--api-key'" in log  # the server was given the option
    assert (tmp_path / "site" / "05_benchmark_single_stream.html").exists()
