"""Connection-level client side of tests/e2e/serve_connections.sh: raw sockets and asyncio against `ember serve`.

  serve_http.py connections PORT READ_TIMEOUT   idle and slow clients, half-close, pipelining, keep-alive,
                                                100-continue, no compression
  serve_http.py max_connections PORT LIMIT      the connection past --max-connections is answered 503
  serve_http.py load PORT CLIENTS               CLIENTS concurrent completions: only 200s and 429s, no resets
  serve_http.py idle PORT N                     (benchmark) /health beside N idle connections: its latency, or none
"""
import asyncio
import json
import socket
import sys
import time

from checks import check, fail

PORT = 0


def connect(timeout=10):
    return socket.create_connection(("127.0.0.1", PORT), timeout=timeout)


def request_bytes(method, path, body=None, extra=b""):
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\n".encode() + extra
    if body is None:
        return head + b"\r\n"
    data = json.dumps(body).encode()
    return head + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data


class Reader:
    """Reads HTTP/1.1 responses, one after another, from a socket (Content-Length or chunked bodies)."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _more(self):
        part = self.sock.recv(65536)
        check(part, "the connection closed in the middle of a response")
        self.buf += part

    def _line(self):
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._more()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def response(self):
        """(status, headers with lower-case names, body bytes)."""
        status = int(self._line().split(b" ")[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.split(b":", 1)
            headers[k.decode().strip().lower()] = v.decode().strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                n = int(self._line().split(b";")[0], 16)
                if n == 0:
                    self._line()
                    break
                body += self._take(n)
                self._take(2)
        else:
            body = self._take(int(headers.get("content-length", "0")))
        return status, headers, body

    def closed(self, wait=5):
        """Whether the server closes the connection (EOF) within `wait` seconds, with no more bytes."""
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, socket.timeout):
            return False


def one(data, shut_write=False):
    with connect() as s:
        s.sendall(data)
        if shut_write:
            s.shutdown(socket.SHUT_WR)
        return Reader(s).response()


def health_ok(what):
    t = time.monotonic()
    status, _, body = one(request_bytes("GET", "/health"))
    check(status == 200 and json.loads(body)["status"] == "ok", f"{what}: /health -> {status} {body[:200]}")
    return time.monotonic() - t


COMPLETION = {"prompt": "int main", "max_tokens": 4, "temperature": 0}


def connections(read_timeout):
    # Idle connections cost no thread: with 300 open and silent, /health and a completion are answered.
    idle = [connect() for _ in range(300)]
    took = health_ok("300 idle connections")
    status, _, body = one(request_bytes("POST", "/v1/completions", COMPLETION))
    check(status == 200 and json.loads(body)["choices"], f"completion beside 300 idle connections: {status} {body}")
    print(f"ok: 300 idle connections, /health answered in {took * 1000:.0f} ms")
    for s in idle:
        s.close()

    # A slow client: half a header, then nothing. It gets 408 after the read timeout and the connection closes.
    with connect(timeout=read_timeout + 10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHo")
        r = Reader(s)
        status, _, body = r.response()
        check(status == 408 and json.loads(body)["error"]["message"], f"a header never finished: {status} {body}")
        check(r.closed(), "the connection of a timed-out header stays open")
    # A body that stops halfway: 408 too.
    with connect(timeout=read_timeout + 10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"prompt\": ")
        status, _, body = Reader(s).response()
        check(status == 408, f"a body never finished: {status} {body}")
    health_ok("after the slow clients")
    print(f"ok: a header or a body that stops is answered 408 after --read-timeout {read_timeout}")

    # Half-close: the request, then the client's end of the connection shut; the response still arrives whole.
    status, _, body = one(request_bytes("POST", "/v1/completions", COMPLETION), shut_write=True)
    check(status == 200 and json.loads(body)["usage"]["completion_tokens"] == 4, f"half-close: {status} {body}")
    status, _, body = one(request_bytes("POST", "/v1/completions", dict(COMPLETION, stream=True)), shut_write=True)
    check(status == 200 and body.rstrip().endswith(b"data: [DONE]"), f"half-closed stream: {status} {body[-100:]}")
    print("ok: a half-closed connection gets its whole response, streamed or not")

    # Pipelining: three requests in one write are answered in order on the one connection.
    with connect() as s:
        s.sendall(request_bytes("GET", "/health") + request_bytes("POST", "/v1/completions", COMPLETION) +
                  request_bytes("GET", "/v1/models") + request_bytes("GET", "/nowhere"))
        r = Reader(s)
        answers = [r.response() for _ in range(4)]
    check([a[0] for a in answers] == [200, 200, 200, 404], f"pipelined statuses {[a[0] for a in answers]}")
    check("status" in json.loads(answers[0][2]) and "choices" in json.loads(answers[1][2]) and
          "data" in json.loads(answers[2][2]), f"pipelined bodies out of order: {answers}")
    print("ok: four pipelined requests answered in order")

    # Keep-alive: a connection serves request after request; Connection: close is honoured.
    with connect() as s:
        r = Reader(s)
        for _ in range(5):
            s.sendall(request_bytes("GET", "/health"))
            check(r.response()[0] == 200, "keep-alive: a later request failed")
        s.sendall(request_bytes("GET", "/health", extra=b"Connection: close\r\n"))
        status, headers, _ = r.response()
        check(status == 200 and headers.get("connection") == "close", f"Connection: close -> {headers}")
        check(r.closed(), "Connection: close did not close")
    print("ok: keep-alive serves requests in turn; Connection: close closes")

    # Expect: 100-continue (curl sends it for bodies over 1 KiB): the interim response, then the body is read.
    data = json.dumps(COMPLETION).encode()
    with connect() as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data))
        r = Reader(s)
        status, _, _ = r.response()
        check(status == 100, f"Expect: 100-continue -> {status}")
        s.sendall(data)
        status, _, body = r.response()
        check(status == 200, f"the body after 100 Continue: {status} {body}")
    print("ok: Expect: 100-continue")

    # No compression, whatever the client accepts: OpenAI's clients and SSE parsers expect plain bodies.
    accept = b"Accept-Encoding: br, gzip, deflate, zstd\r\n"
    for body in (COMPLETION, dict(COMPLETION, stream=True)):
        status, headers, raw = one(request_bytes("POST", "/v1/completions", body, extra=accept))
        check(status == 200 and "content-encoding" not in headers, f"compressed although not asked: {headers}")
        check(raw.startswith(b"{") or raw.startswith(b"data: "), f"not a plain body: {raw[:40]}")
    print("ok: no Content-Encoding, streamed or not, with Accept-Encoding: br, gzip")


def max_connections(limit):
    held = [connect() for _ in range(limit)]
    time.sleep(0.5)  # the server has accepted them all
    with connect() as s:
        s.sendall(request_bytes("GET", "/health"))
        status, headers, body = Reader(s).response()
    check(status == 503 and "connections" in json.loads(body)["error"]["message"],
          f"connection {limit + 1} of --max-connections {limit}: {status} {body}")
    for s in held:
        s.close()
    # The server counts a connection out once it has seen it close: a moment after.
    for _ in range(100):
        status, _, _ = one(request_bytes("GET", "/health"))
        if status == 200:
            break
        time.sleep(0.05)
    health_ok("after the held connections closed")
    print(f"ok: connection {limit + 1} of --max-connections {limit} answered 503; served again once they closed")


def idle(n):
    held = [connect() for _ in range(n)]
    try:
        t = time.monotonic()
        with connect(timeout=10) as s:
            s.sendall(request_bytes("GET", "/health"))
            status = Reader(s).response()[0]
        print(f"idle {n}: /health {status} in {(time.monotonic() - t) * 1000:.0f} ms")
    except (socket.timeout, ConnectionError) as e:
        print(f"idle {n}: /health not answered within 10 s ({type(e).__name__})")
    for s in held:
        s.close()


async def load(clients):
    statuses, errors = {}, []
    start = asyncio.Event()

    async def client(k):
        await start.wait()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", PORT)
            body = {"prompt": "int main", "max_tokens": 8, "seed": k}
            writer.write(request_bytes("POST", "/v1/completions", body, extra=b"Connection: close\r\n"))
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), 120)
            writer.close()
            status = int(data.split(b" ", 2)[1])
            statuses[status] = statuses.get(status, 0) + 1
            if status == 200:
                payload = json.loads(data.split(b"\r\n\r\n", 1)[1])
                if payload["usage"]["completion_tokens"] != 8:
                    errors.append(f"client {k}: {payload['usage']}")
        except Exception as e:  # a reset or a timeout is the failure this test is for
            errors.append(f"client {k}: {type(e).__name__}: {e}")

    tasks = [asyncio.create_task(client(k)) for k in range(clients)]
    await asyncio.sleep(0.1)
    t = time.monotonic()
    start.set()  # every client connects at once
    await asyncio.gather(*tasks)
    took = time.monotonic() - t
    kinds = {}
    for e in errors:
        kind = e.split(": ")[1]
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"load {clients}: {statuses.get(200, 0)} x 200, {statuses.get(429, 0)} x 429, other statuses "
          f"{ {k: v for k, v in statuses.items() if k not in (200, 429)} }, failed clients {kinds or 0}")
    check(not errors, f"{len(errors)} of {clients} clients failed: {errors[:5]}")
    check(set(statuses) <= {200, 429} and statuses.get(200, 0) > 0, f"statuses {statuses}")
    health_ok("after the load")
    print(f"ok: {clients} concurrent clients: {statuses.get(200, 0)} x 200, {statuses.get(429, 0)} x 429, "
          f"no resets ({took:.1f} s)")


def main():
    global PORT
    mode, PORT = sys.argv[1], int(sys.argv[2])
    if mode == "connections":
        connections(float(sys.argv[3]))
    elif mode == "max_connections":
        max_connections(int(sys.argv[3]))
    elif mode == "load":
        asyncio.run(load(int(sys.argv[3])))
    elif mode == "idle":
        idle(int(sys.argv[3]))
    else:
        fail(f"unknown mode {mode}")
    print(f"PASS {mode}")


if __name__ == "__main__":
    main()
