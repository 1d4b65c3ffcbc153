"""Call one servebook function on a host and print its JSON answer.

Sent to the host as ``python3 -`` with this file's text on stdin followed by one line
``main(BLOB, TARGET, KWARGS_JSON, MARK)`` (``Host.call``): it unpacks servebook (BLOB, a base64 zip) into a
temporary directory, calls ``module:function(**kwargs)``, prints MARK and the answer as JSON on the next
line, and removes the unpacked copy.
"""

import base64
import importlib
import io
import json
import os
import shutil
import sys
import tempfile
import zipfile


def main(blob: str, target: str, kwargs_json: str, mark: str) -> None:
    kwargs = json.loads(kwargs_json)
    tmp = tempfile.mkdtemp(prefix="servebook-host-")
    try:
        zipfile.ZipFile(io.BytesIO(base64.b64decode(blob))).extractall(tmp)
        os.environ["SERVEBOOK_HOME"] = tmp
        sys.path.insert(0, os.path.join(tmp, "lib"))
        mod, fn = target.split(":")
        value = getattr(importlib.import_module(mod), fn)(**kwargs)
        sys.stdout.flush()
        print("\n" + mark)
        print(json.dumps(value, default=str))
        sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
