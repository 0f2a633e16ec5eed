"""serve_util.py — starts a real `attn serve` process for the serve tests and always stops it.

    with Served(attn, model_dir, "--max-batch", "4") as s:
        r = s.post("/v1/completions", {...})

The server listens on port 0 (a free port); the port is read from its first line
("attn serve: listening on http://HOST:PORT ..."), then /health is polled until it answers
200. On leaving the block the process gets SIGTERM, then SIGKILL after a few seconds, so no
server outlives a test whatever happens in it.
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import requests

START_TIMEOUT = 60  # seconds for the port line and for /health to say 200


class ServerFailed(Exception):
    pass


class Served:
    def __init__(self, attn, model_dir, *args, env=None, checks=None):
        self.cmd = [attn, "serve", "--model", model_dir, "--port", "0", "--threads", "1", *args]
        self.env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", **(env or {}))
        self.proc = None
        self.port = None
        self.lines = []  # stdout lines
        self.err = []    # stderr lines
        self.headers = {}
        self.checks = checks  # when set, a failed completion is a failed check, not an exception

    # -- lifetime ---------------------------------------------------------------------------
    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=self.env)
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True).start()
        try:
            deadline = time.time() + START_TIMEOUT
            while self.port is None:
                for line in list(self.lines):
                    m = re.search(r"listening on http://[^:]+:(\d+)", line)
                    if m:
                        self.port = int(m.group(1))
                if self.proc.poll() is not None:
                    raise ServerFailed("attn serve exited with %s: %s" % (self.proc.returncode, "".join(self.err)))
                if time.time() > deadline:
                    raise ServerFailed("no port line from attn serve")
                time.sleep(0.02)
            while True:
                try:
                    if requests.get(self.url("/health"), timeout=5).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if self.proc.poll() is not None:
                    raise ServerFailed("attn serve exited with %s: %s" % (self.proc.returncode, "".join(self.err)))
                if time.time() > deadline:
                    raise ServerFailed("/health never answered 200")
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Stops the server (SIGTERM, then SIGKILL); returns its exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise ServerFailed("attn serve did not stop within %s s of signal %s" % (timeout, sig))

    @staticmethod
    def _read(stream, into):
        for line in stream:
            into.append(line)

    # -- requests ---------------------------------------------------------------------------
    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def get(self, path, **kw):
        kw.setdefault("timeout", 60)
        kw.setdefault("headers", self.headers)
        return requests.get(self.url(path), **kw)

    def post(self, path, body, **kw):
        kw.setdefault("timeout", 60)
        kw.setdefault("headers", self.headers)
        if isinstance(body, (dict, list)):
            return requests.post(self.url(path), json=body, **kw)
        return requests.post(self.url(path), data=body, **kw)

    def complete(self, body):
        """A non-streamed completion; asserts 200 and returns the JSON."""
        r = self.post("/v1/completions", body)
        if r.status_code != 200:
            if self.checks is None:
                raise AssertionError("HTTP %d: %s" % (r.status_code, r.text))
            self.checks.true(False, "completion %s: HTTP %d: %s" % (str(body)[:100], r.status_code, r.text[:300]))
            return {"choices": [], "usage": None, "object": None, "id": "", "created": None}
        return r.json()

    def stream(self, body):
        """A streamed completion: (list of event JSON objects, saw [DONE])."""
        body = dict(body, stream=True)
        r = self.post("/v1/completions", body, stream=True)
        if r.status_code != 200:
            if self.checks is None:
                raise AssertionError("HTTP %d: %s" % (r.status_code, r.text))
            self.checks.true(False, "stream %s: HTTP %d: %s" % (str(body)[:100], r.status_code, r.text[:300]))
            return [], False
        assert r.headers["Content-Type"] == "text/event-stream", r.headers
        events, done = [], False
        for event in sse_events(r):
            if event == "[DONE]":
                done = True
                continue
            assert not done, "data after [DONE]"
            data = json.loads(event)
            if "error" in data:
                if self.checks is None:
                    raise AssertionError("error event: %s" % event)
                self.checks.true(False, "stream %s: error event %s" % (str(body)[:100], event[:300]))
                continue
            events.append(data)
        return events, done


def sse_events(response):
    """The data of each server-sent event of a streamed response (comments skipped)."""
    data = []
    for raw in response.iter_lines(decode_unicode=False):
        line = raw.decode("utf-8")
        if line == "":
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
    if data:
        yield "\n".join(data)


def streamed_texts(events):
    """choice index -> concatenated text, and index -> finish_reason, of a stream's chunks."""
    texts, reasons = {}, {}
    for e in events:
        for c in e["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + c["text"]
            if c["finish_reason"] is not None:
                assert c["index"] not in reasons, "two finishing chunks for choice %d" % c["index"]
                reasons[c["index"]] = c["finish_reason"]
    return texts, reasons


class Checks:
    """Counts failed checks and reports them, so one script runs every check it has."""

    def __init__(self, name, quiet=False):
        self.name = name
        self.quiet = quiet
        self.failed = 0
        self.passed = 0

    def eq(self, got, want, what):
        if got == want:
            self.passed += 1
        else:
            self.failed += 1
            if not self.quiet:
                print("FAIL %s: got %r, want %r" % (what, got, want), flush=True)

    def true(self, cond, what):
        self.eq(bool(cond), True, what)

    def error(self, r, status, param=None, code=None, what=""):
        """An OpenAI-shaped error response with this status (and param/code when given)."""
        self.eq(r.status_code, status, "%s: status (%s)" % (what, r.text[:200]))
        try:
            err = r.json()["error"]
        except Exception:  # noqa: BLE001 - any non-JSON body is the failure being reported
            self.true(False, "%s: an error JSON body, got %r" % (what, r.text[:200]))
            return
        self.eq(sorted(err.keys()), ["code", "message", "param", "type"], what + ": error fields")
        self.true(isinstance(err["message"], str) and err["message"], what + ": a message")
        if param is not None:
            self.eq(err["param"], param, what + ": param")
        if code is not None:
            self.eq(err["code"], code, what + ": code")

    def done(self):
        print("%s: %d checks passed, %d failed" % (self.name, self.passed, self.failed), flush=True)
        sys.exit(1 if self.failed else 0)
