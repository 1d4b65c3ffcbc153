"""Call one servebook function on a host and print its JSON answer.

Sent to the host as ``python3 -`` with this file's text on stdin followed by the lines ``Host.call`` writes, which
import the function plainly (the ``from`` line names it; nothing is imported by a name known only at run time):

    with unpacked(BLOB):
        from servebook.probe import probe as target
        answer(target, KWARGS_JSON, MARK)

``unpacked`` unpacks servebook (BLOB, a base64 zip) into a temporary directory first on the import path and removes
it afterwards; ``answer`` calls ``target(**kwargs)`` and prints MARK and the answer as JSON on the next line.
"""

import base64
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import zipfile


@contextlib.contextmanager
def unpacked(blob: str):
    tmp = tempfile.mkdtemp(prefix="servebook-host-")
    try:
        zipfile.ZipFile(io.BytesIO(base64.b64decode(blob))).extractall(tmp)
        os.environ["SERVEBOOK_HOME"] = tmp
        sys.path.insert(0, os.path.join(tmp, "lib"))
        yield
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def answer(target, kwargs_json: str, mark: str) -> None:
    value = target(**json.loads(kwargs_json))
    sys.stdout.flush()
    print("\n" + mark)
    print(json.dumps(value, default=str))
    sys.stdout.flush()
