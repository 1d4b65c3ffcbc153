"""A local OpenAI-style SSE server that is clearly not an engine: the benchmark client's test fixture.

    python fake_sse_server.py PORT TOKENS_PER_EVENT EVENTS_PER_WRITE DELAY_S CPU WORD TTFT_S [FAIL_STATUS [DONE_DELAY_S]]   # prints "ready"

Every event carries TOKENS_PER_EVENT copies of WORD; EVENTS_PER_WRITE events per socket write, DELAY_S apart; the
first after TTFT_S; CPU >= 0 pins it. FAIL_STATUS (e.g. 500): every completion is answered with that status and a JSON
error instead (a server whose every request fails). DONE_DELAY_S: the last event (finish reason and usage) and [DONE]
go that much later again, after the DELAY_S that follows every write (a server that ends its stream late). Started by ``servebook.bench.fake.FakeSSEServer``; standard library only.
"""
import asyncio, json, os, sys, time
port, tokens_per_event, events_per_write, delay_s, cpu, word, ttft_s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6], float(sys.argv[7])
fail_status = int(sys.argv[8]) if len(sys.argv) > 8 else 0
done_delay_s = float(sys.argv[9]) if len(sys.argv) > 9 else 0.0
if cpu >= 0 and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {cpu})

def ev(obj):
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

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
            if path.endswith("/v1/models"):
                data = json.dumps({"object": "list", "data": [{"id": "fake-sse", "object": "model", "owned_by": "servebook-fake"}]}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                await writer.drain()
                continue
            if not path.endswith("completions"):  # e.g. bench_serving's GET /get_server_info: not an engine
                data = b'{"detail":"Not Found"}'
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                await writer.drain()
                continue
            if fail_status:
                data = b'{"error":{"message":"fake failure","type":"server_error"}}'
                writer.write(b"HTTP/1.1 %d Failed\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (fail_status, len(data)) + data)
                await writer.drain()
                continue
            n = int(body.get("max_tokens", 16))
            chat = "chat" in path
            text = word * tokens_per_event
            if chat:
                one = ev({"choices": [{"index": 0, "delta": {"content": text}}]})
            else:
                one = ev({"choices": [{"index": 0, "text": text}]})
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            if ttft_s > 0:  # a paced server: headers at once, first token after ttft_s (like an engine's prefill)
                await writer.drain()
                await asyncio.sleep(ttft_s)
            n_events = -(-n // tokens_per_event)
            sent = 0
            while sent < n_events:
                k = min(events_per_write, n_events - sent)
                payload = one * k
                writer.write(b"%x\r\n" % len(payload) + payload + b"\r\n")
                sent += k
                if delay_s > 0:
                    await writer.drain()
                    await asyncio.sleep(delay_s)
                else:
                    await writer.drain()
                    await asyncio.sleep(0)  # take turns with the other streams
            if done_delay_s > 0:
                await asyncio.sleep(done_delay_s)
            fin = {"choices": [{"index": 0, "finish_reason": "length", "text": ""}], "usage": {"prompt_tokens": 1, "completion_tokens": n_events * tokens_per_event}}
            tail = ev(fin) + b"data: [DONE]\n\n"
            writer.write(b"%x\r\n" % len(tail) + tail + b"\r\n0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()

async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with srv:
        await srv.serve_forever()

asyncio.run(main())
