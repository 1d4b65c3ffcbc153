"""A paced OpenAI-style SSE server with SGLang's profiler endpoints, clearly not an engine: capture()'s test fixture.

    SGLANG_TORCH_PROFILER_DIR=DIR python fake_profiler_engine.py PORT STEP_S   # prints "ready"

Streams one token per STEP_S. ``POST /start_profile`` notes the time; ``POST /stop_profile`` writes a gzip Chrome trace
to $SGLANG_TORCH_PROFILER_DIR holding, for every STEP_S of the window, the kernels of one synthetic decode step (an
embedding, two layers of norm / attention / MoE, an LM head, an argmax). Standard library only.
"""
import asyncio, gzip, json, os, sys, time

port, step_s = int(sys.argv[1]), float(sys.argv[2])
state = {}


def ev(obj):
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def trace(t0, t1):
    out, t = [], t0 * 1e6
    step_us = step_s * 1e6
    while t + step_us <= t1 * 1e6:
        k = t
        for name, dur in [("indexSelectLargeIndex", 5)] + [("fused_add_rmsnorm_kernel", 3), ("flash::FlashAttnFwdSm90", 20),
                                                            ("moe_align_block_size_kernel", 3), ("fused_moe_kernel", 40)] * 2 + \
                         [("nvjet_tst_lm_head", 60), ("reduce_kernel<ArgMaxOps>", 2)]:
            out.append({"ph": "X", "cat": "kernel", "name": name, "ts": k, "dur": dur, "args": {"device": 0, "stream": 7}})
            k += dur + 1
        t += step_us
    return {"traceEvents": out}


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = 0
            for l in lines[1:]:
                if l.lower().startswith("content-length:"):
                    length = int(l.split(":", 1)[1])
            body = json.loads(await reader.readexactly(length)) if length else {}
            if path in ("/start_profile", "/stop_profile"):
                if path == "/start_profile":
                    state["t0"] = time.time()
                else:
                    d = os.environ["SGLANG_TORCH_PROFILER_DIR"]
                    os.makedirs(d, exist_ok=True)
                    with open(os.path.join(d, "fake-TP-0.trace.json.gz"), "wb") as f:
                        f.write(gzip.compress(json.dumps(trace(state["t0"], time.time())).encode()))
                data = b"ok\n"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                await writer.drain()
                continue
            n = int(body.get("max_tokens", 16))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            await writer.drain()
            for _ in range(n):
                payload = ev({"choices": [{"index": 0, "text": " the"}]})
                writer.write(b"%x\r\n" % len(payload) + payload + b"\r\n")
                await writer.drain()
                await asyncio.sleep(step_s)
            tail = ev({"choices": [{"index": 0, "finish_reason": "length", "text": ""}], "usage": {"completion_tokens": n}}) + b"data: [DONE]\n\n"
            writer.write(b"%x\r\n" % len(tail) + tail + b"\r\n0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with srv:
        await srv.serve_forever()

asyncio.run(main())
