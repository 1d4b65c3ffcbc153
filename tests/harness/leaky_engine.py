"""A fake engine that prints every form of secret real engines print, then serves HTTP (the drills' server).

    python leaky_engine.py PORT --api-key CLI-SECRET ...     # env: HF_TOKEN, MY_API_KEY (see LAUNCH_ENV)

At start it prints each form below (stdout and stderr, as engines do) and ``READY-MARKER``; a GET of any path
answers 200; SIGTERM makes it print one more secret line and ``BYE-MARKER`` and exit. The drills import this file
(``load()``) for the raw secrets that must never reach a run directory and the masked forms that must.
"""

import http.server
import json
import os
import signal
import sys

# what each form's raw secret is; none of these strings may be in a file of the run
SECRETS = {
    "sglang server_args": "sglArgsSecret-1111",
    "vllm non-default args": "vllmListSecret-2222",
    "json": "jsonSecret-3333",
    "--api-key option": "cliOptionSecret-4444",
    "--api-key=": "cliEqualsSecret-5555",
    "HF token in env": "hf_LeakyEngineToken0123456789",
    "secret-named env var": "plainEnvValue-6666",
    "bearer": "bearerSecret-7777",
    "password=": "passwordSecret-8888",
    "url password": "urlPwSecret-9999",
    "at exit": "exitSecret-0000",
}
LAUNCH_ENV = {"HF_TOKEN": SECRETS["HF token in env"], "MY_API_KEY": SECRETS["secret-named env var"]}
LAUNCH_ARGS = ["--api-key", SECRETS["--api-key option"], f"--api-key={SECRETS['--api-key=']}"]
# what must be in the log instead (each line as masked)
MASKED = [
    "api_key='***'",
    "'api_key': ['***']",
    '"api_key": "***"',
    "--api-key '***'",  # the launch line (shell-quoted)
    "--api-key ***",  # the engine's own echo of its argv
    "--api-key=***",
    "HF_TOKEN=***",
    "MY_API_KEY=***",
    "Bearer ***",
    "password=***",
    "://user:***@",
]
# ordinary lines that must stay exactly as printed
ORDINARY = [
    "Loaded tokenizer: bos_token='<s>' eos_token='</s>' pad_token=<pad>",
    '{"max_tokens": 64, "output_tokens": 12, "model": "/models/tiny"}',
    "first token: 0.123 s; per token: 12.3ms; max_new_tokens=32",
    "Using FLASHINFER attention backend; KV cache 12.5 GiB; --tokenizer /models/tiny --max-num-batched-tokens 8192",
    "admin_api_key=None; api_key=None; the secret of fast decode is memory bandwidth",
]


def load():
    """This file as a module (for the drills: ``SECRETS``, ``MASKED``, ``ORDINARY``, ``PATH``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("leaky_engine", __file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.PATH = os.path.abspath(__file__)
    return mod


def check(text: str, *, final: bool) -> None:
    """Assert ``text`` (a server log) holds no raw secret, every masked form, every ordinary line intact."""
    leaked = [form for form, raw in SECRETS.items() if raw in text]
    assert not leaked, f"raw secrets in the log: {leaked}\n{text}"
    missing = [m for m in MASKED if m not in text]
    assert not missing, f"masked forms missing: {missing}\n{text}"
    broken = [line for line in ORDINARY if line not in text]
    assert not broken, f"ordinary lines changed: {broken}\n{text}"
    assert "READY-MARKER" in text
    if final:
        assert "BYE-MARKER" in text and "exit with token=***" in text, text


def main() -> None:
    port = int(sys.argv[1])
    print(f"server_args=ServerArgs(model_path='/models/tiny', api_key='{SECRETS['sglang server_args']}', admin_api_key=None)")
    print(f"INFO 01-01 non-default args: {{'model': '/models/tiny', 'api_key': ['{SECRETS['vllm non-default args']}']}}",
          file=sys.stderr, flush=True)
    print(json.dumps({"api_key": SECRETS["json"], "port": port}))
    print("argv:", " ".join(sys.argv[2:]))
    print("env HF_TOKEN=" + os.environ["HF_TOKEN"], "MY_API_KEY=" + os.environ["MY_API_KEY"])
    print(f"curl -H 'Authorization: Bearer {SECRETS['bearer']}' https://user:{SECRETS['url password']}@example.org/")
    print(f"db password={SECRETS['password=']}", file=sys.stderr, flush=True)
    for line in ORDINARY:
        print(line)
    print("READY-MARKER", flush=True)

    def bye(*_):
        print(f"exit with token={SECRETS['at exit']}", flush=True)
        print("BYE-MARKER", flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, bye)

    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *a):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Quiet).serve_forever()


if __name__ == "__main__":
    main()
