"""Client side of tests/e2e/serve_api.sh: real HTTP clients (standard library only) against a running `ember serve`.

  serve_client.py tiny PORT GENERATE_TXT    the API, streaming, concurrency and bad requests (block_size 32 model)
  serve_client.py long PORT                 queue full (429) and a client leaving mid-stream (--max-batch 2
                                            --max-queue 1, a model with a long context)
  serve_client.py sigterm PORT PID          SIGTERM while a stream is in flight: it ends with [DONE]
  serve_client.py timeout PORT              a request past --timeout ends with finish_reason "timeout"
"""
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time

from checks import check, fail

PORT = 0
TIMEOUT = 60


def request(method, path, body=None, headers=None, raw=None):
    """(status, headers, parsed JSON or raw text) of one request on a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=TIMEOUT)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers=headers or ({"Content-Type": "application/json"} if data else {}))
    resp = conn.getresponse()
    text = resp.read().decode("utf-8")
    conn.close()
    try:
        return resp.status, resp.headers, json.loads(text)
    except ValueError:
        return resp.status, resp.headers, text


def complete(body):
    status, _, j = request("POST", "/v1/completions", body)
    check(status == 200, f"completion {body} -> {status} {j}")
    check_completion(j, expect_choices=None)
    return j


def check_completion(j, expect_choices):
    check(isinstance(j, dict), f"not an object: {j!r}")
    check(j.get("object") == "text_completion", f"object: {j}")
    check(isinstance(j.get("id"), str) and j["id"].startswith("cmpl-"), f"id: {j}")
    check(isinstance(j.get("created"), int) and isinstance(j.get("model"), str), f"created/model: {j}")
    choices = j.get("choices")
    check(isinstance(choices, list) and len(choices) >= 1, f"choices: {j}")
    if expect_choices is not None:
        check(len(choices) == expect_choices, f"{len(choices)} choices, expected {expect_choices}")
    for i, c in enumerate(choices):
        check(c.get("index") == i and isinstance(c.get("text"), str), f"choice {i}: {c}")
        check("logprobs" in c and c["logprobs"] is None, f"choice {i} logprobs: {c}")
        check(c.get("finish_reason") in ("stop", "length"), f"choice {i} finish_reason: {c}")
    u = j.get("usage")
    check(isinstance(u, dict) and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], f"usage: {j}")


def stream(body, on_chunk=None):
    """(texts by choice index, finish reasons by index, chunks) of a streamed completion; checks the SSE framing."""
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=TIMEOUT)
    conn.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        fail(f"stream {body} -> {resp.status} {resp.read()[:300]}")
    check(resp.headers.get("Content-Type", "").startswith("text/event-stream"), f"content type {resp.headers}")
    texts, reasons, chunks, done = {}, {}, [], False
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.decode("utf-8").rstrip("\n")
        if line == "":
            continue
        check(line.startswith("data: "), f"not an SSE data line: {line!r}")
        check(not done, "data after [DONE]")
        data = line[len("data: "):]
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        check(chunk.get("object") == "text_completion" and chunk["id"].startswith("cmpl-"), f"chunk: {chunk}")
        chunks.append(chunk)
        for c in chunk["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + c["text"]
            if c["finish_reason"] is not None:
                check(c["index"] not in reasons, f"two finish reasons for choice {c['index']}")
                reasons[c["index"]] = c["finish_reason"]
        if on_chunk:
            on_chunk(chunk)
    conn.close()
    check(done, "the stream did not end with data: [DONE]")
    return texts, reasons, chunks


def health():
    status, _, j = request("GET", "/health")
    check(status == 200 and j["status"] == "ok", f"/health -> {status} {j}")
    return j


def expect_error(name, status, param, method="POST", path="/v1/completions", body=None, raw=None, headers=None,
                 code=None):
    st, _, j = request(method, path, body, headers=headers, raw=raw)
    check(st == status, f"{name}: status {st}, expected {status}: {j}")
    check(isinstance(j, dict) and isinstance(j.get("error"), dict), f"{name}: not an error object: {j!r}")
    e = j["error"]
    check(set(e) == {"message", "type", "param", "code"}, f"{name}: error fields {e}")
    check(isinstance(e["message"], str) and e["message"], f"{name}: no message")
    if param is not None:
        check(e["param"] == param, f"{name}: param {e['param']!r}, expected {param!r}")
        check(param.split("[")[0] in e["message"], f"{name}: the message does not name {param}: {e['message']}")
    if code is not None:
        check(e["code"] == code, f"{name}: code {e['code']!r}, expected {code!r}")
    print(f"ok: {name} -> {st} {e['message']}")


def tiny(generate_txt):
    h = health()
    check(h["max_batch"] >= 8, f"health: {h}")
    st, _, models = request("GET", "/v1/models")
    check(st == 200 and models["object"] == "list" and len(models["data"]) == 1, f"/v1/models: {models}")
    model = models["data"][0]["id"]
    check(model == "step_00000030" and models["data"][0]["object"] == "model", f"model id: {models}")

    # temperature 0 equals `ember generate --temperature 0` (which prints the prompt, then the text, then a newline).
    greedy = complete({"model": model, "prompt": "int main", "max_tokens": 20, "temperature": 0})
    text = greedy["choices"][0]["text"]
    check(greedy["usage"] == {"prompt_tokens": 8, "completion_tokens": 20, "total_tokens": 28}, f"usage {greedy}")
    check(greedy["choices"][0]["finish_reason"] == "length", f"finish_reason {greedy}")
    with open(generate_txt, encoding="utf-8", errors="replace") as f:
        gen = f.read()
    check(gen == "int main" + text + "\n", f"serve {text!r} != generate {gen!r}")
    print(f"ok: temperature 0 equals ember generate: {text!r}")

    # A list of prompts with n = 2: choice p * n + i; usage counts each prompt once.
    j = complete({"prompt": ["int main", "void f"], "max_tokens": 5, "n": 2, "seed": 3})
    check_completion(j, expect_choices=4)
    check(j["usage"]["prompt_tokens"] == 14 and j["usage"]["completion_tokens"] == 20, f"list usage {j['usage']}")
    j = complete({"prompt": [[105, 110, 116], [118]], "max_tokens": 2})  # token-id prompts: "int", "v"
    check_completion(j, expect_choices=2)
    j = complete({"prompt": "", "max_tokens": 4})  # an empty prompt starts a document
    check(j["usage"]["prompt_tokens"] == 1, f"empty prompt usage {j['usage']}")
    j = complete({"prompt": "int main", "max_tokens": 0})
    check(j["choices"][0]["text"] == "" and j["choices"][0]["finish_reason"] == "length", f"max_tokens 0: {j}")
    # Past the context (block_size 32) a completion ends with length.
    j = complete({"prompt": "x" * 30, "max_tokens": 10, "temperature": 0})
    check(j["usage"]["completion_tokens"] == 2 and j["choices"][0]["finish_reason"] == "length", f"context: {j}")

    # seed: the same seed gives the same text, another seed another text.
    body = {"prompt": "int main", "max_tokens": 24, "temperature": 1.0, "top_k": 50, "top_p": 0.95}
    a = complete(dict(body, seed=5))["choices"][0]["text"]
    b = complete(dict(body, seed=5))["choices"][0]["text"]
    c = complete(dict(body, seed=6))["choices"][0]["text"]
    check(a == b, f"same seed, different text: {a!r} {b!r}")
    check(a != c, f"different seeds, same text: {a!r}")
    two = complete(dict(body, seed=5, n=2))["choices"]
    check(two[0]["text"] == a and two[1]["text"] != a, f"n=2 with a seed: {two} vs {a!r}")
    print("ok: seeds")

    # stop: the text ends before the first stop sequence (on the seeded text above: the same tokens up to it).
    i = next((i for i in range(4, len(a) - 2) if a[i:i + 2].isascii() and a[i:i + 2].strip()), None)
    check(i is not None, f"sampled text has no ASCII pair for the stop check: {a!r}")
    cut = a[i:i + 2]
    want = a[:a.index(cut)]
    j = complete(dict(body, seed=5, stop=["\x01never", cut]))
    check(j["choices"][0]["text"] == want and j["choices"][0]["finish_reason"] == "stop", f"stop {cut!r}: {j}")
    j = complete(dict(body, seed=5, stop=cut))
    check(j["choices"][0]["text"] == want, f"stop as a string: {j}")
    print(f"ok: stop {cut!r} -> {want!r}")

    # Streaming: chunks parse, their text is the non-stream text, then [DONE]; with include_usage a usage chunk.
    texts, reasons, chunks = stream({"prompt": "int main", "max_tokens": 20, "temperature": 0,
                                     "stream_options": {"include_usage": True}})
    check(texts == {0: text} and reasons == {0: "length"}, f"stream {texts} {reasons} != {text!r}")
    check(len(chunks) >= 3, f"only {len(chunks)} chunks")
    check(chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 20, f"usage chunk {chunks[-1]}")
    texts, reasons, _ = stream({"prompt": ["int main", "void f"], "max_tokens": 6, "n": 2, "seed": 3})
    check(sorted(texts) == [0, 1, 2, 3] and sorted(reasons) == [0, 1, 2, 3], f"multi-choice stream {texts} {reasons}")
    print("ok: streaming")

    concurrency(model, text)
    bad_requests()


def concurrency(model, greedy_text):
    """32 clients, 320 requests (a third streamed, a third greedy and checked against the text alone): no errors,
    each well-formed, and the engine ran several sequences per step."""
    before = health()
    errors, peak = [], [0]
    stop_polling = threading.Event()

    def poll():
        while not stop_polling.is_set():
            peak[0] = max(peak[0], health()["running"])
            time.sleep(0.005)

    def client(k):
        try:
            for i in range(10):
                kind = (k + i) % 3
                if kind == 0:
                    j = complete({"model": model, "prompt": "int main", "max_tokens": 20, "temperature": 0})
                    if j["choices"][0]["text"] != greedy_text:
                        errors.append(f"client {k}: greedy text under load {j['choices'][0]['text']!r}")
                elif kind == 1:
                    j = complete({"prompt": ["for (", "if ("], "max_tokens": 16, "seed": k * 100 + i})
                    check_completion(j, expect_choices=2)
                else:
                    texts, reasons, _ = stream({"prompt": "int main", "max_tokens": 20, "temperature": 0})
                    if texts != {0: greedy_text} or reasons != {0: "length"}:
                        errors.append(f"client {k}: streamed greedy text under load {texts}")
        except SystemExit:
            errors.append(f"client {k}: a check failed")
        except Exception as e:  # noqa: BLE001 - every failure counts
            errors.append(f"client {k}: {type(e).__name__}: {e}")

    poller = threading.Thread(target=poll)
    poller.start()
    t0 = time.time()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    stop_polling.set()
    poller.join()
    check(not errors, f"{len(errors)} errors under load: {errors[:5]}")
    after = health()
    steps = after["steps"] - before["steps"]
    tokens = after["generated_tokens"] - before["generated_tokens"]
    print(f"ok: 320 requests from 32 clients in {elapsed:.1f} s, {tokens} tokens in {steps} steps "
          f"({tokens / max(steps, 1):.2f} per step), peak {peak[0]} running")
    # One sequence at a time would give at most one token per step.
    check(tokens / max(steps, 1) >= 2.0, "the engine did not batch concurrent requests")
    check(peak[0] >= 2, "never more than one sequence running")


def bad_requests():
    ok = {"prompt": "int main", "max_tokens": 4}
    expect_error("malformed JSON", 400, None, raw=b'{"prompt": "a",')
    expect_error("body not an object", 400, None, raw=b'[1, 2]')
    expect_error("empty body", 400, None, raw=b'')
    expect_error("max_tokens abc", 400, "max_tokens", body=dict(ok, max_tokens="abc"))
    expect_error("max_tokens negative", 400, "max_tokens", body=dict(ok, max_tokens=-5))
    expect_error("max_tokens huge", 400, "max_tokens", body=dict(ok, max_tokens=10**12))
    expect_error("max_tokens over --max-tokens-limit", 400, "max_tokens", body=dict(ok, max_tokens=257))
    expect_error("temperature -1", 400, "temperature", body=dict(ok, temperature=-1))
    expect_error("top_p 0", 400, "top_p", body=dict(ok, top_p=0))
    expect_error("top_p 1.5", 400, "top_p", body=dict(ok, top_p=1.5))
    expect_error("stop a number", 400, "stop", body=dict(ok, stop=5))
    expect_error("stop five strings", 400, "stop", body=dict(ok, stop=["a", "b", "c", "d", "e"]))
    expect_error("n 0", 400, "n", body=dict(ok, n=0))
    expect_error("n 1000", 400, "n", body=dict(ok, n=1000))
    expect_error("stream a string", 400, "stream", body=dict(ok, stream="yes"))
    expect_error("no prompt", 400, "prompt", body={"max_tokens": 3})
    expect_error("prompt a number", 400, "prompt", body={"prompt": 7})
    expect_error("prompt token out of vocabulary", 400, "prompt", body={"prompt": [1, 99999]})
    expect_error("prompt longer than the context", 400, "prompt", body={"prompt": "x" * 33})
    expect_error("unknown model", 404, "model", body=dict(ok, model="gpt-4"), code="model_not_found")
    expect_error("unknown model route", 404, "model", method="GET", path="/v1/models/gpt-4", code="model_not_found")
    expect_error("unknown route", 404, None, method="GET", path="/v1/chat/completions")
    expect_error("GET completions", 405, None, method="GET", path="/v1/completions")
    expect_error("POST models", 405, None, method="POST", path="/v1/models", body={})
    expect_error("DELETE health", 405, None, method="DELETE", path="/health")
    expect_error("body over 1 MiB", 413, None, raw=json.dumps({"prompt": "x" * (1 << 21)}).encode())
    # A body of no declared length is refused before a byte of it is read (the server must not wait); a chunked body
    # is read up to the limit; a declared length over the limit is refused before the body is sent.
    check(raw_status(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n\r\n") == 411, "no Content-Length: not 411")
    chunked = b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = json.dumps({"prompt": "int main", "max_tokens": 2}).encode()
    check(raw_status(chunked + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)) == 200, "a chunked body: not 200")
    big = b"x" * (1 << 20)
    check(raw_status(chunked + b"%x\r\n%s\r\n" % (len(big), big) + b"%x\r\n%s\r\n" % (len(big), big)) == 413,
          "a chunked body over the limit: not 413")
    check(raw_status(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999\r\n\r\n") == 413,
          "a huge Content-Length with no body sent: not 413")
    check(raw_status(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n") == 400,
          "Content-Length -1: not 400")
    check(raw_status(b"POST /v1/other HTTP/1.1\r\nHost: t\r\n\r\n") == 404, "POST /v1/other, no length: not 404")
    check(raw_status(b"POST /v1/other HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}") == 404,
          "POST to an unknown route: not 404")
    check(raw_status(b"GARBAGE\r\n\r\n") == 400, "a malformed request line: not 400")
    print("ok: no length (411), chunked (200, 413 over the limit), huge declared length (413), Content-Length -1 "
          "(400), unknown POST route (404), garbage (400)")
    # Deep nesting stays an ordinary 400.
    expect_error("deeply nested body", 400, None, raw=b'{"prompt": ' + b"[" * 50000 + b"]" * 50000 + b"}")
    # The server still answers after all of that.
    complete(ok)


def raw_status(data):
    """The status of a response to raw request bytes (the request may be incomplete: the server must answer)."""
    with socket.create_connection(("127.0.0.1", PORT), timeout=10) as s:
        s.sendall(data)
        head = b""
        while b"\r\n" not in head:
            part = s.recv(4096)
            check(part, f"connection closed without a response to {data[:40]!r}")
            head += part
    return int(head.split(b" ")[1])


def read_first_chunk(body):
    """An open streaming response (connection, response) after its first data line."""
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=TIMEOUT)
    conn.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    check(resp.status == 200, f"stream -> {resp.status}")
    while True:
        line = resp.readline().decode()
        check(line != "", "the stream ended before its first chunk")
        if line.startswith("data: {"):
            return conn, resp


def rest_of_stream(resp):
    """(generated text after the first chunk, finish reason) once the stream ends in [DONE]."""
    text, reason, done = "", None, False
    for raw in resp:
        line = raw.decode().rstrip("\n")
        if not line:
            continue
        check(line.startswith("data: ") and not done, f"bad stream line {line!r}")
        if line == "data: [DONE]":
            done = True
            continue
        c = json.loads(line[6:])["choices"][0]
        text += c["text"]
        reason = c["finish_reason"] or reason
    check(done, "the stream did not end with [DONE]")
    return text, reason


def long_context():
    long_body = {"prompt": "int main", "max_tokens": 1000, "temperature": 1.0, "seed": 1}
    before = health()
    # Two long streams fill both slots, one short request waits in the queue (--max-queue 1), the next is refused.
    a_conn, a = read_first_chunk(long_body)
    b_conn, b = read_first_chunk(dict(long_body, seed=2))
    queued = {}
    t = threading.Thread(target=lambda: queued.update(j=complete({"prompt": "x", "max_tokens": 5})))
    t.start()
    for _ in range(200):
        if health()["queued"] == 1:
            break
        time.sleep(0.01)
    check(health()["queued"] == 1, "the third request did not wait in the queue")
    expect_error("queue full", 429, None, body={"prompt": "x", "max_tokens": 5}, code="queue_full")
    # Client A leaves mid-stream: its sequence is cancelled, B and the queued request go on.
    a.close()
    a_conn.sock.shutdown(socket.SHUT_RDWR)
    a_conn.close()
    text, reason = rest_of_stream(b)
    b_conn.close()
    check(reason == "length" and len(text) > 0, f"the stream beside a departed client: {reason}")
    t.join()
    check(queued["j"]["usage"]["completion_tokens"] == 5, f"queued request: {queued}")
    for _ in range(200):
        h = health()
        if h["running"] == 0 and h["queued"] == 0:
            break
        time.sleep(0.01)
    tokens = h["generated_tokens"] - before["generated_tokens"]
    # B's 1000 and the queued 5, and A's until its first failed write: far fewer than its 1000.
    check(h["running"] == 0 and tokens < 1000 + 5 + 500, f"A was not cancelled: {tokens} tokens generated, {h}")
    complete({"prompt": "x", "max_tokens": 3})
    print(f"ok: a client left mid-stream ({tokens - 1005} tokens generated for it), the others finished")


def sigterm(pid):
    conn, resp = read_first_chunk({"prompt": "int main", "max_tokens": 1000, "temperature": 1.0, "seed": 1})
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.05)
    # New requests, on new connections, are answered 503 while the stream in flight finishes; /health says why.
    st, _, j = request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
    check(st == 503 and j["error"]["type"] == "service_unavailable_error", f"during shutdown: {st} {j}")
    st, _, j = request("GET", "/health")
    check(st == 503 and j["status"] == "shutting_down", f"/health during shutdown: {st} {j}")
    print("ok: 503 and /health shutting_down while the stream in flight finishes")
    text, reason = rest_of_stream(resp)
    conn.close()
    check(reason == "length", f"in-flight stream after SIGTERM ended with {reason}")
    print(f"ok: the stream in flight at SIGTERM finished ({len(text)} characters after its first chunk)")


def timeout():
    st, _, j = request("POST", "/v1/completions", {"prompt": "int main", "max_tokens": 1000})
    check(st == 200 and j["choices"][0]["finish_reason"] == "timeout", f"past --timeout: {st} {j}")
    check(j["usage"]["completion_tokens"] < 1000, f"past --timeout: {j['usage']}")
    print(f"ok: --timeout ended a request after {j['usage']['completion_tokens']} tokens")


def main():
    global PORT
    mode, PORT = sys.argv[1], int(sys.argv[2])
    if mode == "tiny":
        tiny(sys.argv[3])
    elif mode == "long":
        long_context()
    elif mode == "sigterm":
        sigterm(int(sys.argv[3]))
    elif mode == "timeout":
        timeout()
    else:
        fail(f"unknown mode {mode}")
    print(f"PASS {mode}")


if __name__ == "__main__":
    main()
