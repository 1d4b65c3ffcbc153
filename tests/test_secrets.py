"""Secrets: every form engines print is masked, ordinary text is not, and the log copier is fast and complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from servebook.processes import start_log_copier
from servebook.results import RunStore
from servebook.secrets import MASK, copy_masked, mask_argv, mask_text, mask_value
from servebook.servers import Launch, shell_line

# (what an engine or a tool prints, what must be written instead)
FORMS = [
    ("server_args=ServerArgs(model_path='/m', api_key='sglSecret-1', admin_api_key=None)",
     "server_args=ServerArgs(model_path='/m', api_key='***', admin_api_key=None)"),
    ("non-default args: {'model': '/m', 'api_key': ['vllmSecret-2', 'vllmSecret-3'], 'max_num_seqs': 8}",
     "non-default args: {'model': '/m', 'api_key': ['***', '***'], 'max_num_seqs': 8}"),
    ('{"api_key": "jsonSecret-4", "max_tokens": 64}', '{"api_key": "***", "max_tokens": 64}'),
    ('{"hf_token": "jsonToken-5abcdefg", "admin-api-key": "dash-6"}', '{"hf_token": "***", "admin-api-key": "***"}'),
    ("vllm serve /m --api-key cliSecret-7 --port 8000", "vllm serve /m --api-key *** --port 8000"),
    ("sglang --api-key='cli Secret 8' --admin-api-key=cliSecret-9", "sglang --api-key='***' --admin-api-key=***"),
    ("vllm serve /m --hf-token hf_cliToken12345678", "vllm serve /m --hf-token ***"),
    ("HF_TOKEN=hf_envToken12345678 NCCL_IB_PASSWORD=ncclPw-10 python -m x", "HF_TOKEN=*** NCCL_IB_PASSWORD=*** python -m x"),
    ("curl -H 'Authorization: Bearer bearerSecret-11'", "curl -H 'Authorization: Bearer ***'"),
    ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic ***"),
    ("X-Api-Key: headerSecret-12", "X-Api-Key: ***"),
    ("git clone https://me:urlPw-13@github.com/x", "git clone https://me:***@github.com/x"),
    ("password=hunter2 and passwd: swordfish", "password=*** and passwd: ***"),
    ("token=hunter22aa", "token=***"),
    ("a stray hf_strayToken12345678 in text", "a stray *** in text"),
    ("key sk-proj-abcdefgh1234 and ghp_abcdefgh12345678", "key *** and ***"),
    # URLs and DSNs: an empty user, an @ or a / in the password
    ("redis://:redisPw-14@cache:6379/0", "redis://:***@cache:6379/0"),
    ("postgres://me:p@ss/w0rd-15@db.local:5432/x", "postgres://me:***@db.local:5432/x"),
    # auth headers of every spelling, cookies, Digest and Token schemes
    ("curl -H 'X-Auth-Token: hdrTok-16' -H \"X-Goog-Api-Key: AIzaSy17\"", "curl -H 'X-Auth-Token: ***' -H \"X-Goog-Api-Key: ***\""),
    ("Private-Token: glpat-abc18", "Private-Token: ***"),
    ("Cookie: sessionid=abc19; csrftoken=def", "Cookie: ***"),
    ("Set-Cookie: sid=abc20; Path=/", "Set-Cookie: ***"),
    ('Authorization: Digest username="u", response="6629fae49393a05397450978507c4ef1"', "Authorization: Digest ***"),
    ("Authorization: Token tokSecret-21", "Authorization: Token ***"),
    # query strings
    ("GET /v1/m?key=AIzaSyQuery22&alt=json", "GET /v1/m?key=***&alt=json"),
    ("https://h/a?token=qTok-23abc&n=5 and ?api_key=qKey-24&max_tokens=12", "https://h/a?token=***&n=5 and ?api_key=***&max_tokens=12"),
    ('<a href="/x?a=1&amp;access_token=htmlTok-25">', '<a href="/x?a=1&amp;access_token=***">'),
    # PEM private keys, JWTs, GitHub and Slack tokens
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\nQyNTUxOQ\n-----END OPENSSH PRIVATE KEY-----",
     "-----BEGIN OPENSSH PRIVATE KEY-----\n***\n-----END OPENSSH PRIVATE KEY-----"),
    ('{"key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADAN\\n-----END PRIVATE KEY-----\\n"}',
     '{"key": "-----BEGIN PRIVATE KEY-----***-----END PRIVATE KEY-----\\n"}'),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U end", "jwt *** end"),
    ("gho_abcdefgh12345 ghs_abcdefgh1234 github_pat_11ABCDEFG_abcdefghijkl", "*** *** ***"),
    ("slack xoxb-1234-5678-abcdefgh xoxp-12345678-abcdef xapp-1-A0-123-abc", "slack *** *** ***"),
    # a key and its value in colour codes
    ("\x1b[1mapi_key\x1b[0m='colouredSecret-26'", "api_key='***'"),
]
# lines an engine prints that hold no secret: they stay exactly as they are
ORDINARY = [
    "Loaded tokenizer: bos_token='<s>' eos_token='</s>' pad_token=<pad> unk_token: <unk>",
    '{"max_tokens": 64, "output_tokens": 12, "eos_token": "</s>", "pad_token": "<|pad|>"}',
    "first token: 0.123 s; per token: 12.3ms; max_new_tokens=32 num_token: 7 last_token=12345678",
    "vllm serve /m --tokenizer /m/tok --max-num-batched-tokens 8192 --trust-remote-code --max-model-len 4096",
    "admin_api_key=None, api_key=None, hf_token=None, 'api_key': [], \"api_key\": null, password=''",
    "Using FLASHINFER backend; KV cache 12.5 GiB; the secret of decode speed is bandwidth",
    "INFO:     127.0.0.1:51234 - \"GET /health HTTP/1.1\" 200 OK",
    "Capturing CUDA graphs (bs=[1, 2, 4, 8]): 100%|##########| 4/4 [00:01<00:00,  2.1it/s]",
    "loss=0.25 lr=1e-4 step=10 https://huggingface.co/org/model",
    "tokens/s: 81.5  tokenizer: LlamaTokenizerFast  tokenizer_mode='auto'",
    "Decode batch. #running-req: 1, #token: 1234, token usage: 0.01, gen throughput (token/s): 81.5",
    "X-Max-Tokens: 12; KV cache key: layer.0; auth: required; Date: Mon, 12 Jan; Content-Type: application/json",
    "the GPU is busy for nearly all of the time per token: GPU-bound, so the kernels decide",
    "GET /v1/models?limit=10&max_tokens=64&stream=true HTTP/1.1",
    "\x1b[32mINFO\x1b[0m:     Started server process [1234]; session 3 of 5",
    "https://huggingface.co/org/model?revision=main git@github.com:org/repo.git",
]


@pytest.mark.parametrize("raw,masked", FORMS)
def test_each_secret_form_is_masked(raw, masked):
    assert mask_text(raw, []) == masked
    assert mask_text(masked, []) == masked  # masking twice changes nothing


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_text_stays_intact(line):
    assert mask_text(line, []) == line
    assert mask_value({"line": line, "words": line.split()}) == {"line": line, "words": line.split()}


def test_argv_rows_and_shell_lines():
    argv = ["sglang", "serve", "--api-key", "argvSecret-1", "--hf-token", "--port", "1", "--api-key=argvSecret-2"]
    assert mask_argv(argv) == ["sglang", "serve", "--api-key", MASK, "--hf-token", "--port", "1", "--api-key=***"]
    row = mask_value({"argv": argv, "api_key": ["a-b-c-d"], "HF_TOKEN": "x", "n": 3, "nested": {"token": "hf_abcdefghijk"}})
    assert row == {"argv": mask_argv(argv), "api_key": [MASK], "HF_TOKEN": MASK, "n": 3, "nested": {"token": MASK}}
    line = shell_line(["vllm", "serve", "--api-key", "shellSecret 3"], {"HF_TOKEN": "hf_shellToken12345", "A": "b"})
    assert "shellSecret" not in line and "hf_shell" not in line
    assert line == "A=b HF_TOKEN='***' vllm serve --api-key '***'"
    assert Launch(cmd=["x", "--api-key", "k-e-y-1"], port=1).shell() == "x --api-key '***'"


def test_every_table_row_and_the_manifest_are_masked(tmp_path):
    raws = ["rowSecret-1", "rowSecret-2", "rowSecret-3", "rowSecret-4", "hf_rowToken123456789"]
    store = RunStore.at(tmp_path / "run")
    store.append("backends", {"launch": f"sglang serve --api-key {raws[0]} --port 1", "argv": ["vllm", "--api-key", raws[1]],
                              "server_args": f"ServerArgs(api_key='{raws[2]}')", "non_default": {"api_key": [raws[3]]},
                              "log_line": f'{{"hf_token": "{raws[4]}"}}', "tok_s": 81.5})
    store.append("any_table", {"cmd": f"x --api-key={raws[0]}"})
    store.write_manifest({"launch": f"vllm serve --api-key {raws[1]}", "args": {"api_key": raws[2]}})
    store.write_text("notes.txt", f"api_key='{raws[3]}'")
    blob = "".join(p.read_text() for p in store.path.iterdir())
    assert not [r for r in raws if r in blob] and MASK in blob
    row = store.rows("backends")[0]
    assert row["launch"] == "sglang serve --api-key *** --port 1" and row["argv"] == ["vllm", "--api-key", MASK]
    assert row["non_default"] == {"api_key": [MASK]} and row["tok_s"] == 81.5


def test_copier_writes_whole_lines_masked_and_the_rest_at_end_of_file(tmp_path):
    log = tmp_path / "log"
    r, w = os.pipe()
    import threading

    th = threading.Thread(target=copy_masked, args=(r, str(log), ["envValue-77"]))
    th.start()
    os.write(w, b"api_key='split")  # a line cut in two writes is masked whole
    time.sleep(0.2)
    assert not log.exists() or log.read_bytes() == b""
    os.write(w, b"Secret-1'\nprogress 10%\rprogress 20%\r")
    time.sleep(0.2)
    assert log.read_bytes() == b"api_key='***'\nprogress 10%\rprogress 20%\r"  # \r ends a line too (progress bars)
    os.write(w, b"\xff\xfe not utf-8 \xe2\x82\xac envValue-77\nno newline at the end token=abcdefgh12")
    os.close(w)
    th.join(5)
    os.close(r)
    assert not th.is_alive()
    assert log.read_bytes().endswith(b"\xff\xfe not utf-8 \xe2\x82\xac ***\nno newline at the end token=***")


def test_copier_process_masks_the_servers_environment_values_and_ends_at_end_of_file(tmp_path):
    log = tmp_path / "log"
    env = dict(os.environ, MY_DB_PASSWORD="pw45")  # short values of the server's secret variables count here
    w, copier = start_log_copier(log, env)
    try:
        child = subprocess.Popen([sys.executable, "-c", "print('db pw45 ok'); print('done')"], stdout=w, env=env)
    finally:
        os.close(w)
    child.wait(10)
    assert copier.wait(10) == 0
    assert log.read_text() == "db *** ok\ndone\n"


def test_masking_a_large_log_is_fast(tmp_path):
    """A server log of 100k lines (a few with secrets) goes through the copier in well under a second per 10 MB."""
    lines = [f"INFO 12-01 10:00:{i % 60:02d} [engine.py:{i}] step {i}: 8 running, 0 waiting, KV 12.5%, 81.5 tok/s\n" if i % 2 else
             # SGLang's decode line: every line of it holds a hint word ("#token:"), so the patterns run on each one
             f"Decode batch. #running-req: 1, #token: {i}, token usage: 0.01, gen throughput (token/s): 81.5\n" for i in range(100_000)]
    for i in range(0, len(lines), 997):
        lines[i] = f"server_args=ServerArgs(api_key='fastSecret-{i}', max_tokens={i})\n"
    data = "".join(lines).encode()
    r, w = os.pipe()
    log = tmp_path / "log"
    import threading

    th = threading.Thread(target=copy_masked, args=(r, str(log), []))
    t0 = time.perf_counter()
    th.start()
    view = memoryview(data)
    while view:
        view = view[os.write(w, view[:1 << 16]):]
    os.close(w)
    th.join(60)
    elapsed = time.perf_counter() - t0
    os.close(r)
    text = log.read_text()
    assert "fastSecret" not in text and text.count("api_key='***'") == len(range(0, len(lines), 997))
    assert len(text.splitlines()) == len(lines)
    assert elapsed < 3.0 * max(1, len(data) / 10e6), f"{len(data) / 1e6:.1f} MB masked in {elapsed:.2f} s"
    print(json.dumps({"mb": round(len(data) / 1e6, 1), "s": round(elapsed, 3)}))
