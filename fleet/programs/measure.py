"""A short measured load against the SGLang server of the host it runs on (fleet/tune/measure.py).

Run on the host, sent whole as `PYTHON -c <this file> CONFIG` (CONFIG: base64 of a JSON object: url,
model, auth_file, prompts, requests, concurrency, max_tokens, timeout_s). `requests` streamed chat
completions, `concurrency` in flight at once, each to max_tokens; the server's /metrics counters read
before and after. Nothing is sent after timeout_s; a request still running then is cut off (failed).
Its answer is one record, framed as fleet.core.wire's: the marker line `@@measure`, then the JSON as one
base64 line: {"wall_s", "before", "after", "requests": [[latency_s, ok, tokens, ttft_s, error], ...]}.

Only the standard library: nothing of the deploy is importable on a host, and the server's own Python
(the one this runs with) may have nothing else.
"""

import base64
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

COUNTERS = ("sglang:generation_tokens_total", "sglang:spec_verify_calls_total", "sglang:spec_accept_length",
            "sglang:gen_throughput")
ERROR_CHARS = 200
METRICS_BYTES = 1 << 20


def opener():
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through the host's proxy


def headers(config):
    out = {"Content-Type": "application/json"}
    if config.get("auth_file"):
        with open(config["auth_file"]) as f:  # `Authorization: Bearer KEY`: the key is never an argument
            name, _, value = f.read().strip().partition(":")
        out[name.strip()] = value.strip()
    return out


def metrics(config):
    """The figures this load is judged by: a counter (`_total`) summed over its samples (SGLang 0.5.23 keeps one
    child per is_streaming value: a streamed request's tokens are not in the "false" one), a gauge's first."""
    try:
        with opener().open(config["url"] + "/metrics", timeout=10) as r:
            text = r.read(METRICS_BYTES).decode("utf-8", "replace")
    except (OSError, urllib.error.URLError):
        return {}
    found = {}
    for line in text.split("\n"):
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in COUNTERS or (name in found and not name.endswith("_total")):
            continue
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        found[name] = found.get(name, 0.0) + value
    return found


def one(config, prompt, deadline):
    """[latency_s, ok, tokens, ttft_s, error] of one streamed chat completion."""
    body = json.dumps({"model": config["model"], "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": config["max_tokens"], "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    started = time.monotonic()
    first, tokens, chunks = None, None, 0
    try:
        request = urllib.request.Request(config["url"] + "/v1/chat/completions", body, headers(config))
        with opener().open(request, timeout=max(1.0, deadline - started)) as r:
            for raw in r:
                if time.monotonic() > deadline:
                    return [time.monotonic() - started, False, 0, None, "cut off: the load's time ran out"]
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                event = json.loads(line[5:])
                if event.get("error"):
                    said = "error event: " + json.dumps(event)
                    return [time.monotonic() - started, False, 0, None, said[:ERROR_CHARS]]
                if (event.get("usage") or {}).get("completion_tokens") is not None:
                    tokens = int(event["usage"]["completion_tokens"])
                for choice in event.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("reasoning_content"):
                        chunks += 1
                        first = first if first is not None else time.monotonic() - started
    except urllib.error.HTTPError as e:
        said = "HTTP %d: %s" % (e.code, e.read(ERROR_CHARS))
        return [time.monotonic() - started, False, 0, None, said[:ERROR_CHARS]]
    except (OSError, ValueError, socket.timeout) as e:
        return [time.monotonic() - started, False, 0, None, (type(e).__name__ + ": " + str(e))[:ERROR_CHARS]]
    made = chunks if tokens is None else tokens
    if made <= 0:
        return [time.monotonic() - started, False, 0, None, "no text in the stream"]
    return [time.monotonic() - started, True, made, first, ""]


def main(config):
    deadline = time.monotonic() + config["timeout_s"]
    prompts, results, lock = config["prompts"], [], threading.Lock()
    sent = [0]

    def worker():
        while True:
            with lock:
                if sent[0] >= config["requests"] or time.monotonic() >= deadline:
                    return
                prompt = prompts[sent[0] % len(prompts)]
                sent[0] += 1
            result = one(config, prompt, deadline)
            with lock:
                results.append(result)

    before = metrics(config)
    started = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(config["concurrency"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 5)
    wall = time.monotonic() - started
    with lock:
        done = list(results)
    answer = {"wall_s": wall, "before": before, "after": metrics(config), "requests": done}
    sys.stdout.write("@@measure\n" + base64.b64encode(json.dumps(answer).encode()).decode() + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(json.loads(base64.b64decode(sys.argv[1])))
