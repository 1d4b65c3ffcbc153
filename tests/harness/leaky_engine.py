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
    # masked by value: registered at launch from a credential-named variable or option the patterns do not know
    "variable of another spelling": "cookieEnvValue-1212",
    "option of another spelling": "passPhraseOpt-1313",
    "empty user, @ and / in the password": "p@ss/w0rd-1414",
    "custom auth header": "hdrSecret-1515",
    "cookie header": "cookieSecret-1616",
    "digest header": "digestSecret-1717",
    "query key": "querySecret-1818",
    "PEM body": "MIIEpQIBAAKCAQEApemSecret1919",
    "JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJqd3QyMDIwIn0.jwtSig-2020xyz",
    "GitHub token": "ghp_LeakyGithub2121abcdef",
    "GitHub fine-grained token": "github_pat_11LEAKY2121_xyzabcdefgh",
    "Slack token": "xoxb-2222-leaky-slack-token",
    "long line (pattern)": "longSecret-2525",
    "long line (registered)": "longRegistered-2626",
}
# values printed cut in two (a line wrap, colour codes): neither half may reach a file
SPLIT = {"wrapped": ("wrappedEnv", "Value-2323"), "coloured": ("colourSecret", "Quiet-2424")}
LAUNCH_ENV = {"HF_TOKEN": SECRETS["HF token in env"], "MY_API_KEY": SECRETS["secret-named env var"],
              "SvcSessionCookie": SECRETS["variable of another spelling"], "WRAP_TOKEN": "".join(SPLIT["wrapped"]),
              "COLOUR_CRED": "".join(SPLIT["coloured"]), "LONG_AUTH": SECRETS["long line (registered)"]}
LAUNCH_ARGS = ["--api-key", SECRETS["--api-key option"], f"--api-key={SECRETS['--api-key=']}",
               "--upstream-pass-phrase", SECRETS["option of another spelling"]]
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
    "redis://:***@cache.local:6379/0",
    "X-Custom-Auth: ***",
    "Cookie: ***",
    "Authorization: Digest ***",
    "/v1/models?key=***&alt=json",
    "-----BEGIN RSA PRIVATE KEY-----",
    "jwt *** github *** *** slack ***",
]
# ordinary lines that must stay exactly as printed
ORDINARY = [
    "Loaded tokenizer: bos_token='<s>' eos_token='</s>' pad_token=<pad>",
    '{"max_tokens": 64, "output_tokens": 12, "model": "/models/tiny"}',
    "first token: 0.123 s; per token: 12.3ms; max_new_tokens=32",
    "Using FLASHINFER attention backend; KV cache 12.5 GiB; --tokenizer /models/tiny --max-num-batched-tokens 8192",
    "admin_api_key=None; api_key=None; the secret of fast decode is memory bandwidth",
    "Decode batch. #running-req: 1, #token: 1234, token usage: 0.01, gen throughput (token/s): 81.5",
    "X-Max-Tokens: 12; KV cache key: layer.0; auth: required",
]
LONG = 200_000  # one line of this many characters, the secrets near the copier's 64 KiB cut points


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
    leaked += [form for form, halves in SPLIT.items() if any(h in text for h in halves)]
    assert not leaked, f"raw secrets in the log: {leaked}\n{text}"
    missing = [m for m in MASKED if m not in text]
    assert not missing, f"masked forms missing: {missing}\n{text}"
    broken = [line for line in ORDINARY if line not in text]
    assert not broken, f"ordinary lines changed: {broken}\n{text}"
    assert "READY-MARKER" in text
    if final:
        assert "BYE-MARKER" in text and "exit with token=***" in text, text


def _long_line() -> str:
    """One line of ``LONG`` characters: a key and its value and a registered value right at the 64 KiB cut points."""
    pattern, registered = f"api_key='{SECRETS['long line (pattern)']}'", SECRETS["long line (registered)"]
    cut = 1 << 16
    line = "long: " + "w" * (cut - 12 - len("long: ")) + " " + pattern
    line += "z" * (2 * cut - 5 - len(line)) + registered
    return line + " " + "y" * (LONG - len(line) - 1)


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
    print(f"session cookie is {os.environ['SvcSessionCookie']}; phrase {SECRETS['option of another spelling']}")
    print(f"cache at redis://:{SECRETS['empty user, @ and / in the password']}@cache.local:6379/0")
    print(f"curl -H 'X-Custom-Auth: {SECRETS['custom auth header']}' -H 'Cookie: sessionid={SECRETS['cookie header']}'")
    print(f'Authorization: Digest username="u", realm="r", response="{SECRETS["digest header"]}"')
    print(f"GET /v1/models?key={SECRETS['query key']}&alt=json")
    print(f"-----BEGIN RSA PRIVATE KEY-----\n{SECRETS['PEM body']}\nAKCAQEA0zK2\n-----END RSA PRIVATE KEY-----", flush=True)
    print(f"jwt {SECRETS['JWT']} github {SECRETS['GitHub token']} {SECRETS['GitHub fine-grained token']} slack {SECRETS['Slack token']}")
    print("wrapped: " + SPLIT["wrapped"][0], flush=True)  # the rest comes on the next line, as a pretty-printer wraps it
    print("    " + SPLIT["wrapped"][1])
    print(f"coloured: \x1b[1;31m{SPLIT['coloured'][0]}\x1b[0m\x1b[31m{SPLIT['coloured'][1]}\x1b[0m")
    print(_long_line(), flush=True)
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
